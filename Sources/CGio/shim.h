#ifndef PEERVOICE_CGIO_SHIM_H
#define PEERVOICE_CGIO_SHIM_H
#include <gio/gio.h>
#include <gio/gunixfdlist.h>
#include <glib-unix.h>
#include <sys/eventfd.h>

/* Swift cannot use GLib's type-string macros; these one-liners stand in for them. */
static inline const GVariantType *cgio_type_from_string(const char *s) { return (const GVariantType *)s; }
#endif
