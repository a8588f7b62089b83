/* bench/fec: one pass of libopus over a 48 kHz mono s16 file with random packet loss, the way the
 * daemon encodes (VOIP, signal voice, complexity 10, DTX, in-band FEC with a packet-loss hint) and
 * the way its jitter buffer repairs a loss when the next packet is there (decode it with fec=1).
 *
 * usage: fec_codec IN.raw OUT.raw FRAME_SAMPLES BITRATE HINT_PERCENT LOSS_PERCENT SEED REPAIR
 * A hint of 0 is FEC off. REPAIR 1: a loss is repaired from the next packet when that one arrived;
 * 0: never (a path without jitter, where the next packet is not there yet when the loss is played).
 * Writes the decoded audio; prints "frames lost recovered" on stdout.
 */
#include <opus/opus.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { MAX_FRAME = 960, MAX_PACKET = 1500, MAX_FRAMES = 12000 };

/* SplitMix64: the same draws on every machine, unlike rand(). */
static uint64_t state;
static double uniform(void) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static unsigned char packets[MAX_FRAMES][MAX_PACKET];
static int lengths[MAX_FRAMES], lost[MAX_FRAMES];

int main(int argc, char **argv) {
    if (argc != 9) { fprintf(stderr, "usage: %s IN.raw OUT.raw FRAME_SAMPLES BITRATE HINT LOSS SEED REPAIR\n", argv[0]); return 2; }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) { perror("fopen"); return 1; }
    int frame = atoi(argv[3]), bitrate = atoi(argv[4]), hint = atoi(argv[5]);
    double loss = atof(argv[6]);
    state = strtoull(argv[7], NULL, 10);
    int repair = atoi(argv[8]);
    if (frame != 480 && frame != 960) { fprintf(stderr, "FRAME_SAMPLES must be 480 or 960\n"); return 2; }
    int error;
    OpusEncoder *encoder = opus_encoder_create(48000, 1, OPUS_APPLICATION_VOIP, &error);
    OpusDecoder *decoder = opus_decoder_create(48000, 1, &error);
    opus_encoder_ctl(encoder, OPUS_SET_BITRATE(bitrate));
    opus_encoder_ctl(encoder, OPUS_SET_COMPLEXITY(10));
    opus_encoder_ctl(encoder, OPUS_SET_SIGNAL(OPUS_SIGNAL_VOICE));
    opus_encoder_ctl(encoder, OPUS_SET_DTX(1));
    opus_encoder_ctl(encoder, OPUS_SET_INBAND_FEC(1));
    opus_encoder_ctl(encoder, OPUS_SET_PACKET_LOSS_PERC(hint));
    int16_t pcm[MAX_FRAME], decoded[5760];
    int frames = 0;
    while (frames < MAX_FRAMES && fread(pcm, sizeof pcm[0], frame, in) == (size_t)frame) {
        lengths[frames] = opus_encode(encoder, pcm, frame, packets[frames], MAX_PACKET);
        lost[frames] = uniform() * 100 < loss;
        frames++;
    }
    int dropped = 0, recovered = 0;
    for (int i = 0; i < frames; i++) {
        /* DTX packets (<= 2 bytes) are not sent by the daemon: the decoder conceals them. */
        int sent = lengths[i] > 2, n;
        if (sent && !lost[i]) {
            n = opus_decode(decoder, packets[i], lengths[i], decoded, 5760, 0);
        } else if (repair && sent && i + 1 < frames && !lost[i + 1] && lengths[i + 1] > 2) {
            n = opus_decode(decoder, packets[i + 1], lengths[i + 1], decoded, frame, 1);
            recovered++;
        } else {
            n = opus_decode(decoder, NULL, 0, decoded, frame, 0);
        }
        dropped += sent && lost[i];
        fwrite(decoded, sizeof decoded[0], n, out);
    }
    printf("%d %d %d\n", frames, dropped, recovered);
    opus_encoder_destroy(encoder);
    opus_decoder_destroy(decoder);
    fclose(in);
    fclose(out);
    return 0;
}
