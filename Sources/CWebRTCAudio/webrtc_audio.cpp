// webrtc-audio-processing 0.3 behind the C API of peervoice_webrtc_audio.h.
#include "peervoice_webrtc_audio.h"

#include <algorithm>
#include <memory>
#include <webrtc/modules/audio_processing/include/audio_processing.h>

struct peervoice_webrtc_audio {
    std::unique_ptr<webrtc::AudioProcessing> apm;
    webrtc::StreamConfig stream{48000, 1, false};
    bool echo_cancel = false;
    int suppression_level = 1;
    int double_talk_suppression_level = -1;
    /// The level the canceller runs at now, and for how many more blocks the near end counts as
    /// talking.
    int current_level = 1;
    int double_talk_hold = 0;
    float far_end[PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES];
    float capture[PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES];
};

/// Mean square; `out` receives the block as floats.
static float to_float(const int16_t *in, float *out) {
    float energy = 0;
    for (int i = 0; i < PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES; i++) {
        out[i] = in[i] / 32768.0f;
        energy += out[i] * out[i];
    }
    return energy / PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES;
}

// Double talk, as the processing's own effect tells it: with only the echo in the microphone the
// canceller takes most of it away (offline 25 dB and more from the first second at moderate),
// while the near end's speech comes through at nearly its level. A block of sound (above
// -55 dBFS) that loses less than 10 dB is the near end talking; the hold bridges the pauses
// between its words (bench-echo --offline chose 600 ms: 300 ms left words' starts at moderate,
// 1.5 s kept low on well after the near end stopped, which an echo path moving then exposes).
static const float double_talk_floor = 3.2e-6f;  // -55 dBFS, mean square
static const float double_talk_loss = 0.1f;      // -10 dB
static const int double_talk_hold_blocks = 60;   // 600 ms

extern "C" peervoice_webrtc_audio_settings peervoice_webrtc_audio_default_settings(void) {
    peervoice_webrtc_audio_settings settings = {};
    settings.echo_cancel = 1;
    settings.noise_suppression = 1;
    settings.high_pass = 1;
    settings.gain_control = 0;
    // The settings PipeWire's echo-cancel module uses: a longer filter, and a delay the
    // canceller finds itself when the hint is off (a room adds its own).
    settings.extended_filter = 1;
    settings.delay_agnostic = 1;
    // Moderate while only the echo is there, low while the near end talks over it. Offline
    // (bench-echo --offline) the linear filter cancels the echo at every level and low keeps
    // double talk best (PESQ-WB 1.77 against 1.41); but through real PipeWire low alone left
    // 22 dB of ERLE after 3 s in bench-echo (moderate 60 dB): the live echo path moves, the
    // filter keeps re-converging, and moderate's suppressor covers the gap. Low only in double
    // talk keeps moderate's ERLE and most of low's double talk. High cuts the near end further.
    settings.suppression_level = 1;
    settings.double_talk_suppression_level = 0;
    // Low: it keeps the near end best, alone and in double talk (bench-echo live, with the switch
    // above: double talk PESQ-WB 1.92-1.94 against 1.59 at moderate; offline 1.78 against 1.70), and
    // still takes 9 dB off steady noise (moderate 15 dB, high 21 dB; the service test asks for
    // 6 dB less in the speaker's pauses and measured 12-13 dB). High cost bench-echo 0.6 PESQ-WB
    // on B's speech alone.
    settings.noise_level = 0;
    return settings;
}

static const webrtc::EchoCancellation::SuppressionLevel suppression_levels[] = {
    webrtc::EchoCancellation::kLowSuppression, webrtc::EchoCancellation::kModerateSuppression,
    webrtc::EchoCancellation::kHighSuppression};
static const webrtc::NoiseSuppression::Level noise_levels[] = {
    webrtc::NoiseSuppression::kLow, webrtc::NoiseSuppression::kModerate, webrtc::NoiseSuppression::kHigh,
    webrtc::NoiseSuppression::kVeryHigh};

extern "C" peervoice_webrtc_audio *peervoice_webrtc_audio_create(const peervoice_webrtc_audio_settings *settings,
                                                                 int *error) {
    const peervoice_webrtc_audio_settings &set = *settings;
    if (set.suppression_level < 0 || set.suppression_level > 2 || set.double_talk_suppression_level < -1
        || set.double_talk_suppression_level > 2 || set.noise_level < 0 || set.noise_level > 3) {
        if (error) *error = webrtc::AudioProcessing::kBadParameterError;
        return nullptr;
    }
    std::unique_ptr<peervoice_webrtc_audio> processor(new peervoice_webrtc_audio());
    webrtc::Config config;
    config.Set<webrtc::ExtendedFilter>(new webrtc::ExtendedFilter(set.extended_filter != 0));
    config.Set<webrtc::DelayAgnostic>(new webrtc::DelayAgnostic(set.delay_agnostic != 0));
    // On by default in the library: the analog-microphone AGC, which would want to move the
    // device's volume; the digital one below is all PeerVoice offers.
    config.Set<webrtc::ExperimentalAgc>(new webrtc::ExperimentalAgc(false));
    processor->apm.reset(webrtc::AudioProcessing::Create(config));
    webrtc::ProcessingConfig processing = {{processor->stream, processor->stream, processor->stream, processor->stream}};
    webrtc::EchoCancellation *canceller = processor->apm->echo_cancellation();
    webrtc::NoiseSuppression *suppressor = processor->apm->noise_suppression();
    webrtc::GainControl *gain = processor->apm->gain_control();
    int result = processor->apm->Initialize(processing);
    if (result == 0) result = processor->apm->high_pass_filter()->Enable(set.high_pass != 0);
    if (result == 0) result = canceller->enable_drift_compensation(false);
    if (result == 0) result = canceller->set_suppression_level(suppression_levels[set.suppression_level]);
    if (result == 0) result = canceller->Enable(set.echo_cancel != 0);
    if (result == 0) result = suppressor->set_level(noise_levels[set.noise_level]);
    if (result == 0) result = suppressor->Enable(set.noise_suppression != 0);
    if (result == 0) result = gain->set_mode(webrtc::GainControl::kAdaptiveDigital);
    if (result == 0) result = gain->Enable(set.gain_control != 0);
    if (result == 0) result = processor->apm->voice_detection()->Enable(true);
    if (result != 0) {
        if (error) *error = result;
        return nullptr;
    }
    processor->echo_cancel = set.echo_cancel != 0;
    processor->suppression_level = processor->current_level = set.suppression_level;
    processor->double_talk_suppression_level = set.double_talk_suppression_level;
    return processor.release();
}

extern "C" void peervoice_webrtc_audio_destroy(peervoice_webrtc_audio *processor) { delete processor; }

extern "C" int peervoice_webrtc_audio_set_echo_cancel(peervoice_webrtc_audio *processor, int on) {
    webrtc::EchoCancellation *canceller = processor->apm->echo_cancellation();
    int result = canceller->set_suppression_level(suppression_levels[processor->suppression_level]);
    if (result == 0) result = canceller->Enable(on != 0);
    if (result != 0) return result;
    processor->echo_cancel = on != 0;
    processor->current_level = processor->suppression_level;
    processor->double_talk_hold = 0;
    return 0;
}

extern "C" int peervoice_webrtc_audio_far_end(peervoice_webrtc_audio *processor, const int16_t *block) {
    to_float(block, processor->far_end);
    float *channels[] = {processor->far_end};
    return processor->apm->ProcessReverseStream(channels, processor->stream, processor->stream, channels);
}

extern "C" int peervoice_webrtc_audio_capture(peervoice_webrtc_audio *processor, int16_t *block, int delay_ms,
                                              int *has_voice) {
    float in_energy = to_float(block, processor->capture);
    float *channels[] = {processor->capture};
    // Required before every block while the canceller runs (else ProcessStream fails).
    if (processor->echo_cancel) processor->apm->set_stream_delay_ms(delay_ms);
    int result = processor->apm->ProcessStream(channels, processor->stream, processor->stream, channels);
    if (result != 0) return result;
    float out_energy = 0;
    for (int i = 0; i < PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES; i++) {
        float scaled = processor->capture[i] * 32768.0f;
        block[i] = (int16_t)std::max(-32768.0f, std::min(32767.0f, scaled));
        out_energy += processor->capture[i] * processor->capture[i];
    }
    if (processor->echo_cancel && processor->double_talk_suppression_level >= 0) {
        out_energy /= PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES;
        if (in_energy > double_talk_floor && out_energy > in_energy * double_talk_loss) {
            processor->double_talk_hold = double_talk_hold_blocks;
        } else if (processor->double_talk_hold > 0) {
            processor->double_talk_hold--;
        }
        int level = processor->double_talk_hold > 0 ? processor->double_talk_suppression_level
                                                    : processor->suppression_level;
        if (level != processor->current_level) {
            result = processor->apm->echo_cancellation()->set_suppression_level(suppression_levels[level]);
            if (result != 0) return result;
            processor->current_level = level;
        }
    }
    if (has_voice) *has_voice = processor->apm->voice_detection()->stream_has_voice() ? 1 : 0;
    return 0;
}
