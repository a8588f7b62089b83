#ifndef PEERVOICE_CSODIUM_SHIM_H
#define PEERVOICE_CSODIUM_SHIM_H
#include <sodium.h>
#endif
