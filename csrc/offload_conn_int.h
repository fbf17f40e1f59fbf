/*
 * offload_conn_int.h: what offload_req.c (a connection's requests) and offload_conn.c (its
 * replies) share: the connection, its command FIFO and its held replies.
 */
#ifndef VT_OFFLOAD_CONN_INT_H
#define VT_OFFLOAD_CONN_INT_H

#include <pthread.h>
#include <stdint.h>

#include "offload_state.h"
#include "vt_cmds.h"
#include "vt_resp.h"

#define MAX_FD VT_MAX_FD
#define WIT_ARG_MAX 256
#define H_READ 1   /* a read's argument: must find its key durable */
#define H_WIT 2    /* an argument the witness compares with the AOF's keys */
#define H_PEND 4   /* a key this write made pending until its reply */
#define H_COMMIT 8 /* a key a blocking write commits at its reply */
#define H_FLAGS 15ull

enum { E_OTHER, E_WRITE, E_READ, E_WIDE_READ };
enum { P_NONE, P_MULTI, P_EXEC, P_DISCARD, P_UNSYNC, P_CLIENT, P_REPLICA, P_SHUTDOWN, P_SHUTDOWN_ABORT };

struct entry {
    uint8_t kind, blocking; /* blocking: left out of the bound's count (blocked in the server, or behind one) */
    uint16_t nwide; /* keyspace-wide writes it answers (pending until its reply) */
    uint32_t nh;    /* its hashes, next in the connection's hash queue */
};

struct chunk {
    struct chunk *next;
    uint64_t need, wneed, held_ns, jobs_at_hold;
    uint32_t replies, writes, reads, suspects;
    uint32_t waiting; /* of its replies, those that wait for durability (the rest wait behind them) */
    size_t len, off;
    char data[];
};

struct conn {
    pthread_mutex_t mu;
    int fd, active, unsynced, replica; /* replica: it asked SYNC/PSYNC (a replica's link) */
    struct vt_req_parser rp;
    struct vt_reply_framer fr;
    /* the command being parsed */
    int64_t argc;
    int proto, known, sub_wanted;
    struct vt_cmdinfo ci;
    char name[VT_CMD_NAME];
    size_t nlen;
    uint32_t nh;
    /* MULTI ... EXEC: the queued commands' hashes wait at the queue's tail for EXEC */
    int in_multi, tx_write, tx_wide_read;
    int rejecting; /* the command being parsed is a write rejected over the bound (renamed in the read buffer) */
    int tx_rejected; /* a write of the open transaction was rejected: the server aborts its EXEC */
    int named;       /* the command being parsed has its name read: accepted, or rejecting */
    uint64_t req_bytes; /* the multibulk request being parsed, its bytes so far (the bound's request size) */
    char *rbuf;    /* the server's read buffer being parsed (writable: the server's own) */
    uint32_t tx_start, tx_wide;
    struct entry *q;
    uint32_t qh, qt, qcap;
    uint64_t *hv;
    uint32_t hh, ht, hcap;
    struct chunk *held, *held_tail;
    uint32_t held_n;
    uint64_t held_need;
    uint64_t held_bytes;   /* bytes of replies it holds: counted against its client-output-buffer-limit */
    uint64_t soft_since;   /* when held_bytes went over the soft limit (0: under it) */
    struct vt_held_node node;
    struct conn *loop_next; /* offload_links.c: its stream chunks need the loop's end (listed: loop_listed) */
    int loop_listed;
};

extern const struct vt_req_cb vt_conn_req_cb; /* ctx: the connection */
struct conn *vt_conn_get(int fd); /* fd's connection, or NULL (offload_conn.c) */
/* replies can no longer be matched with commands (offload_req.c) */
void vt_conn_unsync(struct conn *c);
/* what its queued commands made pending is settled: at what is queued now (they may have run),
 * or, defer, handed to the deferred keyspace-wide count (they may not have run yet) */
void vt_conn_settle_all(struct conn *c, int defer);

#endif
