#ifndef PEERVOICE_CADW_SHIM_H
#define PEERVOICE_CADW_SHIM_H
#include <adwaita.h>
#endif
