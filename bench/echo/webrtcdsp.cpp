// bench/echo's second offline harness (`run.py --offline`, clean speech): webrtc-audio-processing
// 0.3 driven as GStreamer 1.22's webrtcdsp drives it in bench-voice's gstreamer-dsp (S16 caps:
// the int16 AudioFrame interface; before each 10 ms block the far end its echo probe holds, here
// silence, as nothing plays; the delay hint its probe gives, 0 in delay-agnostic mode; voice
// detection at low likelihood with the level estimator), so the same fixture can go through both
// PeerVoice's shim and this, each setting toggled.
//
//   webrtcdsp MIC.s16 OUT.s16 [name=value ...]
//
// Settings (defaults as bench-voice's GStreamerPipeline.DSP): aec=1 aec_level=1 (0 low, 1
// moderate, 2 high) ns=1 ns_level=1 (0 low .. 3 very high) hp=1 vad=1 int16=1 (0: the float
// interface, as PeerVoice's shim uses) far=1 (0: the far end is never fed) delay=0.
#include <webrtc/modules/audio_processing/include/audio_processing.h>
#include <webrtc/modules/interface/module_common_types.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MIC.s16 OUT.s16 [name=value ...]\n", argv[0]);
        return 2;
    }
    std::map<std::string, int> set = {{"aec", 1}, {"aec_level", 1}, {"ns", 1}, {"ns_level", 1}, {"hp", 1},
                                      {"vad", 1},  {"int16", 1},     {"far", 1}, {"delay", 0}};
    for (int i = 3; i < argc; i++) {
        const char *equals = std::strchr(argv[i], '=');
        std::string name = equals ? std::string(argv[i], equals - argv[i]) : argv[i];
        if (!equals || set.count(name) == 0) {
            std::fprintf(stderr, "unknown setting %s\n", argv[i]);
            return 2;
        }
        set[name] = std::atoi(equals + 1);
    }
    std::vector<int16_t> mic;
    FILE *in = std::fopen(argv[1], "rb");
    if (!in) return 2;
    int16_t buffer[4096];
    size_t count;
    while ((count = std::fread(buffer, sizeof(int16_t), 4096, in)) > 0) mic.insert(mic.end(), buffer, buffer + count);
    std::fclose(in);

    webrtc::Config config;
    config.Set<webrtc::ExtendedFilter>(new webrtc::ExtendedFilter(true));
    config.Set<webrtc::ExperimentalAgc>(new webrtc::ExperimentalAgc(false));
    config.Set<webrtc::DelayAgnostic>(new webrtc::DelayAgnostic(true));
    std::unique_ptr<webrtc::AudioProcessing> apm(webrtc::AudioProcessing::Create(config));
    webrtc::StreamConfig stream(48000, 1, false);
    webrtc::ProcessingConfig processing = {{stream, stream, stream, stream}};
    if (apm->Initialize(processing) != 0) return 1;
    if (set["hp"]) apm->high_pass_filter()->Enable(true);
    if (set["aec"]) {
        apm->echo_cancellation()->enable_drift_compensation(false);
        apm->echo_cancellation()->set_suppression_level(webrtc::EchoCancellation::SuppressionLevel(set["aec_level"]));
        apm->echo_cancellation()->Enable(true);
    }
    if (set["ns"]) {
        apm->noise_suppression()->set_level(webrtc::NoiseSuppression::Level(set["ns_level"]));
        apm->noise_suppression()->Enable(true);
    }
    if (set["vad"]) {
        apm->voice_detection()->Enable(true);
        apm->voice_detection()->set_likelihood(webrtc::VoiceDetection::kLowLikelihood);
        apm->voice_detection()->set_frame_size_ms(10);
        apm->level_estimator()->Enable(true);
    }
    const size_t block = 480;
    float samples[block], far[block];
    for (size_t start = 0; start + block <= mic.size(); start += block) {
        int16_t *pcm = &mic[start];
        if (set["far"]) {
            if (set["int16"]) {
                webrtc::AudioFrame frame;
                frame.num_channels_ = 1;
                frame.sample_rate_hz_ = 48000;
                frame.samples_per_channel_ = block;
                std::memset(frame.data_, 0, block * sizeof(int16_t));
                apm->AnalyzeReverseStream(&frame);
            } else {
                std::memset(far, 0, sizeof far);
                float *channels[] = {far};
                apm->ProcessReverseStream(channels, stream, stream, channels);
            }
        }
        apm->set_stream_delay_ms(set["delay"]);
        int result;
        if (set["int16"]) {
            webrtc::AudioFrame frame;
            frame.num_channels_ = 1;
            frame.sample_rate_hz_ = 48000;
            frame.samples_per_channel_ = block;
            std::memcpy(frame.data_, pcm, block * sizeof(int16_t));
            result = apm->ProcessStream(&frame);
            // As webrtcdsp: a block the library refused goes out as it came.
            if (result >= 0) std::memcpy(pcm, frame.data_, block * sizeof(int16_t));
        } else {
            for (size_t i = 0; i < block; i++) samples[i] = pcm[i] / 32768.0f;
            float *channels[] = {samples};
            result = apm->ProcessStream(channels, stream, stream, channels);
            for (size_t i = 0; i < block && result >= 0; i++) {
                float scaled = samples[i] * 32768.0f;
                pcm[i] = int16_t(scaled > 32767 ? 32767 : scaled < -32768 ? -32768 : scaled);
            }
        }
        if (result < 0) {
            std::fprintf(stderr, "ProcessStream failed: %d\n", result);
            return 1;
        }
    }
    FILE *out = std::fopen(argv[2], "wb");
    if (!out || std::fwrite(mic.data(), sizeof(int16_t), mic.size(), out) != mic.size()) return 1;
    std::fclose(out);
    return 0;
}
