#ifndef PEERVOICE_COPUS_SHIM_H
#define PEERVOICE_COPUS_SHIM_H
#include <opus/opus.h>
#endif
