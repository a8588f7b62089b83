/* Drives speexdsp's jitter buffer (libspeexdsp, <speex/speex_jitter.h>) over a packet trace, one
 * get per playback tick, the way its documentation and speexdsp's own wrapper use it:
 * put every packet that has arrived, jitter_buffer_get(), then jitter_buffer_tick().
 * Used only by the jitter-buffer benchmark (bench/jitter); not part of PeerVoice. */
#ifndef PEERVOICE_BENCH_SPEEX_SIM_H
#define PEERVOICE_BENCH_SPEEX_SIM_H
#include <stdint.h>

typedef struct {
    uint64_t seq;        /* sender sequence number */
    uint32_t timestamp;  /* 48 kHz sender clock, wraps */
    int64_t arrival_ns;  /* receiver clock */
} bench_packet;

enum {
    BENCH_SILENCE = 0,   /* nothing synced yet */
    BENCH_FRAME = 1,     /* packet `seq` played */
    BENCH_CONCEAL = 2,   /* JITTER_BUFFER_MISSING: loss concealment */
    BENCH_INSERT = 3     /* JITTER_BUFFER_INSERTION: concealment inserted to grow the buffer */
};

typedef struct {
    int32_t kind;
    uint64_t seq;
} bench_tick;

/* packets: sorted by arrival_ns. Tick k happens at first_tick_ns + k * tick_ns.
 * margin_samples: JITTER_BUFFER_SET_MARGIN (0 is the library's default).
 * Returns 0, or -1 if the library could not be initialised. */
int speex_simulate(const bench_packet *packets, int32_t count, int32_t frame_samples,
                   int64_t first_tick_ns, int64_t tick_ns, int32_t ticks,
                   int32_t margin_samples, bench_tick *out);

#endif
