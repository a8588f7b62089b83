#ifndef PEERVOICE_CGTK_SHIM_H
#define PEERVOICE_CGTK_SHIM_H
#include <gtk/gtk.h>
#include <libintl.h>
#include <locale.h>
#include <stdio.h>

/* What Swift cannot import from GTK (macros, variadic functions, C globals), as one-liners. */

/* G_TYPE_STRING is a macro. */
static inline GType cgtk_type_string(void) { return G_TYPE_STRING; }

/* G_OBJECT_TYPE() is a macro: the name of an instance's type ("AdwToastWidget"). */
static inline const char *cgtk_type_name_of(gpointer instance) { return G_OBJECT_TYPE_NAME(instance); }

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

/* The accessible name, and only it: GTK 4.8 also names a button with a mnemonic label after that
   label (LABELLED_BY), and reads both ("Accept Accept"). */
static inline void cgtk_accessible_set_name(GtkAccessible *accessible, const char *name) {
    gtk_accessible_reset_relation(accessible, GTK_ACCESSIBLE_RELATION_LABELLED_BY);
    cgtk_accessible_set_string(accessible, GTK_ACCESSIBLE_PROPERTY_LABEL, name);
}

/* gtk_accessible_update_state() is variadic: one boolean state (GTK_ACCESSIBLE_STATE_HIDDEN). */
static inline void cgtk_accessible_set_state(GtkAccessible *accessible, GtkAccessibleState state, gboolean on) {
    GValue value = G_VALUE_INIT;
    g_value_init(&value, G_TYPE_BOOLEAN);
    g_value_set_boolean(&value, on);
    gtk_accessible_update_state_value(accessible, 1, &state, &value);
    g_value_unset(&value);
}
#endif
