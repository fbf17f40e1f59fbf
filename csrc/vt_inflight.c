/*
 * vt_inflight.c: the open-loop client's SETs in flight per key (vt_inflight.h): per key a list in send
 * order (so in sequence order), over a pool of nodes reused as they are answered.
 */
#include "vt_inflight.h"

#include <stdlib.h>

#include "vt_grow.h"

int vt_inflight_init(struct vt_inflight *f, uint32_t keyspace)
{
    size_t n = keyspace ? keyspace : 1;
    *f = (struct vt_inflight){.head = calloc(n, sizeof(uint32_t)), .tail = calloc(n, sizeof(uint32_t))};
    return f->head && f->tail ? 0 : -1;
}

void vt_inflight_free(struct vt_inflight *f)
{
    free(f->head), free(f->tail), free(f->node);
    *f = (struct vt_inflight){0};
}

uint32_t vt_inflight_sent(struct vt_inflight *f, uint32_t key, uint32_t conn, uint64_t seq, uint64_t *floor)
{
    *floor = seq;
    for (uint32_t i = f->head[key]; i; i = f->node[i - 1].next)
        if (f->node[i - 1].conn != conn) { /* the oldest on another connection: the list is in sequence order */
            *floor = f->node[i - 1].seq;
            break;
        }
    uint32_t h = f->free;
    if (h)
        f->free = f->node[h - 1].next;
    else if (vt_grow((void **)&f->node, &f->cap, sizeof(struct vt_inflight_node), f->used + 1) == 0)
        h = ++f->used;
    else
        return 0;
    f->node[h - 1] = (struct vt_inflight_node){seq, conn, f->tail[key], 0};
    if (f->tail[key])
        f->node[f->tail[key] - 1].next = h;
    else
        f->head[key] = h;
    f->tail[key] = h;
    return h;
}

void vt_inflight_answered(struct vt_inflight *f, uint32_t key, uint32_t h)
{
    if (!h)
        return;
    struct vt_inflight_node *n = &f->node[h - 1];
    if (n->prev)
        f->node[n->prev - 1].next = n->next;
    else
        f->head[key] = n->next;
    if (n->next)
        f->node[n->next - 1].prev = n->prev;
    else
        f->tail[key] = n->prev;
    n->next = f->free;
    f->free = h;
}
