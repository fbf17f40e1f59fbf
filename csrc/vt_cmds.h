/*
 * vt_cmds.h: the virtual offload's tables (csrc/vt_cmds.c).
 *
 * Commands: the server's own table, which valkeytrace reads with COMMAND and writes into the
 * offload's control region; indexed here once it is marked ready. Before that (and for a name not
 * in it) a command is unknown, which the caller treats as a keyspace-wide write: held.
 *
 * Keys (the decision, #3381's uncommitted keys): a direct-mapped table of key hashes, each with
 * the writes parsed but not yet answered (pending) and the AOF position the last answered write
 * needs durable (seq). A collision only makes a read wait longer, never less.
 *
 * Witness: for each AOF command queued, its first key (the argument after the name) with the
 * AOF position that makes it durable; 4-way buckets of (24-bit tag, 40-bit position). Written by
 * the main thread only, read by any.
 */
#ifndef VT_CMDS_H
#define VT_CMDS_H

#include <stddef.h>
#include <stdint.h>

#include "offload_layout.h"

struct vt_cmdinfo {
    uint32_t flags; /* VT_CMD_F_* */
    int first, last, step;
};

void vt_cmds_attach(struct vt_offload_control *ctl, struct vt_offload_stats *stats);
/* 1 and *out when name (len bytes, any case; "name|sub" for a subcommand) is in the table */
int vt_cmds_lookup(const char *name, size_t len, struct vt_cmdinfo *out);
/* 1 when the table is indexed (lookups can find something) */
int vt_cmds_ready(void);

/* the decision's key table; h: a key's hash (its low 4 bits are ignored: callers keep flags there) */
void vt_keys_pending(uint64_t h, int delta);       /* a write to h parsed (+1) or dropped unanswered (-1) */
/* its reply framed: durable at seq (dirty while durable, what is durable now, is below it) */
void vt_keys_commit(uint64_t h, uint64_t seq, int was_pending, uint64_t durable);
/* durable reached: the keys it made clean leave the dirty count (stats->dirty_keys_now) */
void vt_keys_settle(uint64_t durable);
uint64_t vt_keys_need(uint64_t h, uint64_t queued); /* what a read of h must wait for */
void vt_wide_pending(int delta);                    /* a keyspace-wide write (FLUSHALL, unknown) */
void vt_wide_commit(uint64_t seq, int was_pending);
uint64_t vt_wide_need(uint64_t queued);             /* what any read must wait for (wide writes) */
uint64_t vt_wide_read_need(uint64_t queued);        /* what a keyspace-wide read must wait for */
/* a write whose reply cannot be told apart (a connection out of sync): keyspace-wide until the
 * third AOF flush after now, by which the server has executed it */
void vt_defer_wide(void);
void vt_flush_tick(uint64_t queued);                /* the main thread queued an AOF flush */

/* the witness's table */
void vt_wit_put(uint64_t h, uint64_t pos, uint64_t durable);
uint64_t vt_wit_get(uint64_t h);

#endif
