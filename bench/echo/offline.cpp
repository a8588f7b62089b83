// bench/echo's offline harness (`run.py --offline`): PeerVoice's shim (Sources/CWebRTCAudio,
// compiled in) over recorded signals, fed the way CaptureProcessing feeds it in a graph of
// 256-frame cycles: each cycle the playback callback adds 256 played samples to the played ring
// and the capture 256 microphone samples; whenever a 20 ms frame is captured, the voice thread
// first gives the processor every whole played block, then the frame's two blocks, each with its
// delay hint (the hint plus what was captured behind it).
//
//   offline FAR.s16 MIC.s16 OUT.s16 HINT_MS [jitter=SEED] [name=value ...]
//
// jitter=SEED (non-zero): the voice thread's passes come late by a random amount, as on a busy
// machine (see main), seeded for repeatable runs.
// FAR and MIC: raw 48 kHz mono 16-bit, equally long. name=value sets a field of
// peervoice_webrtc_audio_settings (e.g. suppression_level=2); the rest stay at PeerVoice's
// defaults. Prints the processing's CPU time per 10 ms block (microseconds) and the share of
// blocks with voice.
#include "peervoice_webrtc_audio.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <ctime>
#include <random>
#include <vector>

static std::vector<int16_t> read_all(const char *path) {
    std::vector<int16_t> samples;
    FILE *file = std::fopen(path, "rb");
    if (!file) return samples;
    int16_t buffer[4096];
    size_t count;
    while ((count = std::fread(buffer, sizeof(int16_t), 4096, file)) > 0) samples.insert(samples.end(), buffer, buffer + count);
    std::fclose(file);
    return samples;
}

static bool set_field(peervoice_webrtc_audio_settings &settings, const char *argument) {
    const char *equals = std::strchr(argument, '=');
    if (!equals) return false;
    std::string name(argument, equals - argument);
    int value = std::atoi(equals + 1);
    struct Field { const char *name; int *field; } fields[] = {
        {"echo_cancel", &settings.echo_cancel}, {"noise_suppression", &settings.noise_suppression},
        {"high_pass", &settings.high_pass}, {"gain_control", &settings.gain_control},
        {"extended_filter", &settings.extended_filter}, {"delay_agnostic", &settings.delay_agnostic},
        {"suppression_level", &settings.suppression_level},
        {"double_talk_suppression_level", &settings.double_talk_suppression_level}, {"noise_level", &settings.noise_level}};
    for (const Field &f : fields) {
        if (name == f.name) {
            *f.field = value;
            return true;
        }
    }
    return false;
}

static double thread_cpu_us() {
    timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return now.tv_sec * 1e6 + now.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s FAR.s16 MIC.s16 OUT.s16 HINT_MS [name=value ...]\n", argv[0]);
        return 2;
    }
    peervoice_webrtc_audio_settings settings = peervoice_webrtc_audio_default_settings();
    unsigned jitter_seed = 0;
    for (int i = 5; i < argc; i++) {
        if (std::strncmp(argv[i], "jitter=", 7) == 0) {
            jitter_seed = unsigned(std::atoi(argv[i] + 7));
        } else if (!set_field(settings, argv[i])) {
            std::fprintf(stderr, "unknown setting %s\n", argv[i]);
            return 2;
        }
    }
    std::vector<int16_t> far = read_all(argv[1]), mic = read_all(argv[2]);
    if (far.empty() || far.size() != mic.size()) {
        std::fprintf(stderr, "FAR and MIC must be equally long and not empty\n");
        return 2;
    }
    int error = 0;
    peervoice_webrtc_audio *processor = peervoice_webrtc_audio_create(&settings, &error);
    if (!processor) {
        std::fprintf(stderr, "setup refused: %d\n", error);
        return 1;
    }
    const int hint = std::atoi(argv[4]);
    const size_t block = PEERVOICE_WEBRTC_AUDIO_BLOCK_SAMPLES, frame = 2 * block, quantum = 256;
    size_t played = 0, far_given = 0, captured = 0, mic_taken = 0;
    long blocks = 0, voiced = 0;
    double cpu = 0;
    // One voice-thread pass: every whole played block, then every whole captured frame.
    auto pass = [&]() -> bool {
        while (captured - mic_taken >= frame) {
            double before = thread_cpu_us();
            for (; played - far_given >= block; far_given += block) {
                if (peervoice_webrtc_audio_far_end(processor, &far[far_given]) != 0) return false;
            }
            for (size_t b = 0; b < 2; b++) {
                int has_voice = 0;
                size_t behind = captured - (mic_taken + (b + 1) * block);
                int delay = hint + int(behind * 1000 / 48000);
                if (peervoice_webrtc_audio_capture(processor, &mic[mic_taken + b * block], delay, &has_voice) != 0) return false;
                voiced += has_voice;
                blocks++;
            }
            mic_taken += frame;
            cpu += thread_cpu_us() - before;
        }
        return true;
    };
    // Without jitter the pass runs right after each cycle's callbacks. With it, as on a busy
    // machine: the pass wakes after the capture callback late by a random share of a cycle (now
    // and then a few cycles), and the next cycle's playback callback may run before it.
    std::mt19937 random(jitter_seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    double pass_due = -1;
    for (size_t cycle = 0; (cycle + 1) * quantum <= mic.size(); cycle++) {
        if (jitter_seed == 0) {
            played += quantum;
            captured += quantum;
            if (!pass()) return 1;
            continue;
        }
        // Within a cycle: the playback callback at +0.2, the capture callback at +0.6.
        double play_at = cycle + 0.2, capture_at = cycle + 0.6;
        if (pass_due >= 0 && pass_due < play_at) { if (!pass()) return 1; pass_due = -1; }
        played += quantum;
        if (pass_due >= 0 && pass_due < capture_at) { if (!pass()) return 1; pass_due = -1; }
        captured += quantum;
        if (pass_due < 0 && captured - mic_taken >= frame) {
            double roll = unit(random);
            double late = roll < 0.7 ? 0.3 * unit(random) : roll < 0.95 ? 0.3 + 1.2 * unit(random) : 1.5 + 1.5 * unit(random);
            pass_due = capture_at + late;
        }
    }
    if (!pass()) return 1;
    peervoice_webrtc_audio_destroy(processor);
    FILE *out = std::fopen(argv[3], "wb");
    if (!out || std::fwrite(mic.data(), sizeof(int16_t), mic.size(), out) != mic.size()) return 1;
    std::fclose(out);
    std::printf("cpu_us_per_block %.2f\nvoiced_share %.3f\n", cpu / blocks, double(voiced) / blocks);
    return 0;
}
