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

/// How a processor is set up; non-zero is on. `peervoice_webrtc_audio_default_settings` gives
/// what PeerVoice ships (docs/VOICE.md); bench/echo's offline sweep varies the rest.
typedef struct peervoice_webrtc_audio_settings {
    int echo_cancel;
    int noise_suppression;
    int high_pass;
    /// Adaptive digital gain control.
    int gain_control;
    /// The canceller's longer filter (and its different suppressor tuning).
    int extended_filter;
    /// The canceller estimates the delay itself rather than trusting the hint.
    int delay_agnostic;
    /// The canceller's suppressor: 0 low, 1 moderate, 2 high.
    int suppression_level;
    /// The suppressor's level while the near end talks over the echo (double talk, told by how
    /// little the processing takes off the microphone), or -1: always `suppression_level`.
    int double_talk_suppression_level;
    /// The noise suppressor: 0 low, 1 moderate, 2 high, 3 very high.
    int noise_level;
} peervoice_webrtc_audio_settings;

/// PeerVoice's settings with every part on except gain control.
peervoice_webrtc_audio_settings peervoice_webrtc_audio_default_settings(void);

/// A processor set up as `settings` says, or NULL when the library refuses the setup (`error`,
/// if not NULL, receives its code).
peervoice_webrtc_audio *peervoice_webrtc_audio_create(const peervoice_webrtc_audio_settings *settings, int *error);
void peervoice_webrtc_audio_destroy(peervoice_webrtc_audio *processor);

/// Turns the echo canceller on (non-zero) or off while the processor runs; the other parts keep
/// their state. On again, it starts afresh (it learns the echo path anew). 0 or the library's
/// error code.
int peervoice_webrtc_audio_set_echo_cancel(peervoice_webrtc_audio *processor, int on);

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
