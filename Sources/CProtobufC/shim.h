#ifndef PEERVOICE_CPROTOBUFC_SHIM_H
#define PEERVOICE_CPROTOBUFC_SHIM_H
#include <protobuf-c/protobuf-c.h>
#endif
