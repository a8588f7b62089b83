#ifndef PEERVOICE_CPIPEWIRE_SHIM_H
#define PEERVOICE_CPIPEWIRE_SHIM_H
#include <pipewire/pipewire.h>
#include <spa/param/audio/format-utils.h>
#endif
