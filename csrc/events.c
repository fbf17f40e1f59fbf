/* events.c: the eBPF ring buffer's consumer callback, in C.
 *
 * libbpf's ring_buffer__consume() calls a callback per record. A Python callback (ctypes) costs
 * several microseconds per record, on a host the traced server shares: with `appendfsync always`
 * the probe submits ~14K records a second (every fsync, every long main-thread block), so the
 * tracer's own CPU was part of the overhead it measures. This callback only appends the record
 * to a growable buffer; Python takes the whole buffer at once. The caller serialises consume and
 * drain (one lock): no locking here. */
#include <stdlib.h>
#include <string.h>
#include "events.h"
#include "valkeytrace.h"

int vt_event_sink_collect(void *ctx, void *data, size_t size)
{
    struct vt_event_sink *s = ctx;
    size_t rec = s->record_size ? s->record_size : size;
    if (s->len + rec > s->cap) {
        size_t cap = s->cap ? s->cap : 64 * rec;
        uint8_t *p;
        while (cap < s->len + rec)
            cap *= 2;
        if (s->max_bytes && cap > s->max_bytes) {
            s->dropped++;
            return 0;
        }
        p = realloc(s->buf, cap);
        if (!p) {
            s->dropped++;
            return 0;
        }
        s->buf = p;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, size < rec ? size : rec);
    if (size < rec)
        memset(s->buf + s->len + size, 0, rec - size);
    s->len += rec;
    s->records++;
    return 0;
}

void vt_event_sink_free(struct vt_event_sink *s)
{
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* Every CPU's call log (valkeytrace.h): the records past its tail appended to the sink (keep = 0:
 * dropped, a log emptied between launches), the tail moved to the head read first. base: the mmapped
 * array, stride bytes an element, size records a log. Returns the records taken. */
uint64_t vt_call_logs_take(struct vt_event_sink *sink, uint8_t *base, size_t stride, unsigned ncpu, uint64_t size,
                           int keep)
{
    uint64_t taken = 0;
    for (unsigned cpu = 0; cpu < ncpu; cpu++) {
        struct vt_call_log_head *h = (struct vt_call_log_head *)(base + (size_t)cpu * stride);
        const uint8_t *recs = (const uint8_t *)(h + 1);
        uint64_t head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE), tail = h->tail;
        if (head - tail > size) /* not written by the probe: a log the tracer does not know */
            tail = head - size;
        for (uint64_t i = tail; keep && i != head; i++)
            vt_event_sink_collect(sink, (void *)(recs + (i & (size - 1)) * sizeof(struct vt_block_event)),
                                  sizeof(struct vt_block_event));
        taken += head - tail;
        __atomic_store_n(&h->tail, head, __ATOMIC_RELEASE); /* the slots are the probe's again */
    }
    return taken;
}
