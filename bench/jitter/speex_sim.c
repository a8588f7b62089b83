/* See CSpeexSim/speex_sim.h. */
#include "CSpeexSim/speex_sim.h"

#include <speex/speex_jitter.h>
#include <string.h>

int speex_simulate(const bench_packet *packets, int32_t count, int32_t frame_samples,
                   int64_t first_tick_ns, int64_t tick_ns, int32_t ticks,
                   int32_t margin_samples, bench_tick *out)
{
    JitterBuffer *jb = jitter_buffer_init(frame_samples);
    if (!jb)
        return -1;
    spx_int32_t margin = margin_samples;
    jitter_buffer_ctl(jb, JITTER_BUFFER_SET_MARGIN, &margin);

    int32_t next = 0;
    int synced = 0;
    for (int32_t k = 0; k < ticks; k++) {
        int64_t now = first_tick_ns + (int64_t)k * tick_ns;
        while (next < count && packets[next].arrival_ns <= now) {
            char data[8];
            memcpy(data, &packets[next].seq, 8);
            JitterBufferPacket p;
            p.data = data;
            p.len = 8;
            p.timestamp = packets[next].timestamp;
            p.span = (spx_uint32_t)frame_samples;
            p.sequence = (spx_uint16_t)packets[next].seq;
            p.user_data = 0;
            jitter_buffer_put(jb, &p);
            synced = 1;
            next++;
        }
        char buf[64];
        JitterBufferPacket got;
        got.data = buf;
        got.len = sizeof buf;
        spx_int32_t offset = 0;
        int r = jitter_buffer_get(jb, &got, frame_samples, &offset);
        if (r == JITTER_BUFFER_OK) {
            uint64_t seq;
            memcpy(&seq, buf, 8);
            out[k].kind = BENCH_FRAME;
            out[k].seq = seq;
        } else if (r == JITTER_BUFFER_INSERTION) {
            out[k].kind = BENCH_INSERT;
            out[k].seq = 0;
        } else {
            out[k].kind = synced ? BENCH_CONCEAL : BENCH_SILENCE;
            out[k].seq = 0;
        }
        jitter_buffer_tick(jb);
    }
    jitter_buffer_destroy(jb);
    return 0;
}
