/* events.h: the eBPF ring buffer's and call logs' consumer, in C (events.c). */
#ifndef VALKEYTRACE_EVENTS_H
#define VALKEYTRACE_EVENTS_H
#include <stddef.h>
#include <stdint.h>

/* Records appended back to back, each exactly record_size bytes, until Python drains them. */
struct vt_event_sink {
    uint8_t *buf;
    size_t len;         /* bytes held */
    size_t cap;
    size_t record_size;
    size_t max_bytes;   /* 0: unbounded */
    uint64_t records;   /* appended since the sink was made */
    uint64_t dropped;   /* records refused: max_bytes reached, or out of memory */
};

int vt_event_sink_collect(void *ctx, void *data, size_t size);
void vt_event_sink_free(struct vt_event_sink *sink);
uint64_t vt_call_logs_take(struct vt_event_sink *sink, uint8_t *base, size_t stride, unsigned ncpu, uint64_t size,
                           int keep);
#endif
