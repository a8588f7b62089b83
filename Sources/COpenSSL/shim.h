#ifndef PEERVOICE_COPENSSL_SHIM_H
#define PEERVOICE_COPENSSL_SHIM_H
#include <openssl/evp.h>
#endif
