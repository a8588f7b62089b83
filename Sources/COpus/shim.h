#ifndef PEERVOICE_COPUS_SHIM_H
#define PEERVOICE_COPUS_SHIM_H
#include <opus/opus.h>

/* opus_encoder_ctl / opus_decoder_ctl are variadic, which Swift cannot call: one wrapper per request. */
static inline int peervoice_opus_set_bitrate(OpusEncoder *st, opus_int32 v) { return opus_encoder_ctl(st, OPUS_SET_BITRATE(v)); }
static inline int peervoice_opus_set_complexity(OpusEncoder *st, opus_int32 v) { return opus_encoder_ctl(st, OPUS_SET_COMPLEXITY(v)); }
static inline int peervoice_opus_set_signal(OpusEncoder *st, opus_int32 v) { return opus_encoder_ctl(st, OPUS_SET_SIGNAL(v)); }
static inline int peervoice_opus_set_inband_fec(OpusEncoder *st, opus_int32 v) { return opus_encoder_ctl(st, OPUS_SET_INBAND_FEC(v)); }
static inline int peervoice_opus_set_packet_loss_perc(OpusEncoder *st, opus_int32 v) { return opus_encoder_ctl(st, OPUS_SET_PACKET_LOSS_PERC(v)); }
static inline int peervoice_opus_set_dtx(OpusEncoder *st, opus_int32 v) { return opus_encoder_ctl(st, OPUS_SET_DTX(v)); }
static inline int peervoice_opus_get_lookahead(OpusEncoder *st, opus_int32 *v) { return opus_encoder_ctl(st, OPUS_GET_LOOKAHEAD(v)); }
static inline int peervoice_opus_get_in_dtx(OpusEncoder *st, opus_int32 *v) { return opus_encoder_ctl(st, OPUS_GET_IN_DTX(v)); }
static inline int peervoice_opus_encoder_reset(OpusEncoder *st) { return opus_encoder_ctl(st, OPUS_RESET_STATE); }
static inline int peervoice_opus_get_last_packet_duration(OpusDecoder *st, opus_int32 *v) { return opus_decoder_ctl(st, OPUS_GET_LAST_PACKET_DURATION(v)); }
static inline int peervoice_opus_decoder_reset(OpusDecoder *st) { return opus_decoder_ctl(st, OPUS_RESET_STATE); }
#endif
