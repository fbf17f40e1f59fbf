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
