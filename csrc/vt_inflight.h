/*
 * vt_inflight.h: the open-loop client's SETs in flight per key (--verify-durability, vt_load.c), and the
 * floor each acknowledged one sets for the reload.
 *
 * The server runs a connection's requests in order, and orders connections as it reads them: a SET of a
 * key still unanswered on another connection when X was sent may run after X, and be the value that
 * stays; one answered before X was sent, or queued before X on X's own connection, ran before it. So once
 * X is acknowledged, the key holds X or a later write: one with a sequence at least X's floor, the oldest
 * of X and the SETs of its key in flight on other connections when X was sent.
 */
#ifndef VT_INFLIGHT_H
#define VT_INFLIGHT_H

#include <stdint.h>

struct vt_inflight_node {
    uint64_t seq;
    uint32_t conn, prev, next; /* prev, next: the key's list (node index + 1; 0: none) */
};

struct vt_inflight {
    uint32_t *head, *tail;            /* per key: its oldest and newest SET in flight (index + 1; 0: none) */
    struct vt_inflight_node *node;    /* a pool; the free ones chained by next */
    uint32_t used, cap, free;
};

/* 0, or -1 without memory */
int vt_inflight_init(struct vt_inflight *f, uint32_t keyspace);
void vt_inflight_free(struct vt_inflight *f);
/* a SET of key with sequence seq (larger than every one before) sent on conn: its handle (> 0; 0 without
 * memory) and *floor, the oldest sequence of key in flight on another connection, or seq */
uint32_t vt_inflight_sent(struct vt_inflight *f, uint32_t key, uint32_t conn, uint64_t seq, uint64_t *floor);
/* the SET of key behind handle answered (or 0: nothing) */
void vt_inflight_answered(struct vt_inflight *f, uint32_t key, uint32_t handle);

#endif
