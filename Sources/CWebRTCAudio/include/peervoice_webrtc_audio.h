#ifndef PEERVOICE_WEBRTC_AUDIO_H
#define PEERVOICE_WEBRTC_AUDIO_H
// A C face for webrtc-audio-processing 0.3 (a C++ library Swift cannot import): one capture
// processor, 48 kHz mono, 10 ms blocks of 16-bit samples.
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct peervoice_webrtc_audio peervoice_webrtc_audio;

/// Samples in one block: 10 ms at 48 kHz.
#define PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES 480

/// A processor with the given parts on (non-zero), or NULL when the library refuses the setup
/// (`error`, if not NULL, receives its code). Echo cancellation uses the extended filter and
/// delay-agnostic mode, moderate suppression; noise suppression is at the moderate level.
peervoice_webrtc_audio *peervoice_webrtc_audio_create(int echo_cancel, int noise_suppression, int high_pass,
                                                      int *error);
void peervoice_webrtc_audio_destroy(peervoice_webrtc_audio *processor);

/// One block of what is being played (the far end), in the order it is played. 0 or the
/// library's error code.
int peervoice_webrtc_audio_far_end(peervoice_webrtc_audio *processor, const int16_t *block);

/// One block of the microphone, processed in place. `delay_ms`: how long after its far-end
/// block was given the echo of it reaches this call. `has_voice` receives the library's voice
/// activity decision (1 or 0). 0 or the library's error code.
int peervoice_webrtc_audio_capture(peervoice_webrtc_audio *processor, int16_t *block, int delay_ms, int *has_voice);

#ifdef __cplusplus
}
#endif
#endif
