#ifndef PEERVOICE_CGTK_SHIM_H
#define PEERVOICE_CGTK_SHIM_H
#include <gtk/gtk.h>
#include <libintl.h>
#include <locale.h>
#include <stdio.h>

/* What Swift cannot import from GTK (macros, variadic functions, C globals), as one-liners. */

/* G_TYPE_STRING is a macro. */
static inline GType cgtk_type_string(void) { return G_TYPE_STRING; }

/* `stdout` is a mutable C global, which Swift 6 refuses to touch: line-buffer it here so a test
   reading the app's output through a pipe sees each line as it is printed. */
static inline void cgtk_stdout_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

/* gtk_accessible_update_property() is variadic: one string property through the GValue variant. */
static inline void cgtk_accessible_set_string(GtkAccessible *accessible, GtkAccessibleProperty property,
                                              const char *text) {
    GValue value = G_VALUE_INIT;
    g_value_init(&value, G_TYPE_STRING);
    g_value_set_string(&value, text);
    gtk_accessible_update_property_value(accessible, 1, &property, &value);
    g_value_unset(&value);
}
#endif
