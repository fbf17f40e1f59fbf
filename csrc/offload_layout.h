/*
 * offload_layout.h: the virtual offload's shared file (record --emulate-offload): the statistics the
 * shim counts and the control valkeytrace writes, laid out for C and for Python
 * (src/valkeytrace/tracers/offload.py mirrors it with numpy dtypes). Included by the lower modules
 * (offload_state.h, vt_cmds.h); the hooks the shim calls are offload.h's.
 */
#ifndef VT_OFFLOAD_LAYOUT_H
#define VT_OFFLOAD_LAYOUT_H

#include "valkeytrace.h"

#define VT_OFFLOAD_MAGIC 0x4f465456u /* "VTFO" little-endian */
#define VT_OFFLOAD_VERSION 7
#define VT_OFFLOAD_DURABLE 1
#define VT_OFFLOAD_EARLY_ACK 2
#define VT_OFFLOAD_WAITED_MAX 8 /* replies that waited 0, 1, ..., 7 or more jobs */

/* state: what the offload is doing (valkeytrace waits for DRAINED before it would SIGKILL) */
#define VT_OFFLOAD_RUNNING 1
#define VT_OFFLOAD_DRAINING 2
#define VT_OFFLOAD_DRAINED 3
#define VT_OFFLOAD_FAILED 4   /* a write or fdatasync failed: nothing more is released */

/* fail_kind */
#define VT_OFFLOAD_FAIL_WRITE 1
#define VT_OFFLOAD_FAIL_FSYNC 2

/* The command table valkeytrace reads from the server (COMMAND) and writes here before any load:
 * one entry per command and subcommand ("client|reply"), its name lowercase. */
#define VT_CMD_NAME 40
#define VT_CMD_MAX 2048
#define VT_CMD_F_WRITE 0x01      /* flagged write, or a key spec that may write (RW/OW/RM): EVAL, FCALL */
#define VT_CMD_F_READONLY 0x02
#define VT_CMD_F_WIDE_READ 0x04  /* reads the whole keyspace (readonly, @keyspace, no key): KEYS, SCAN, DBSIZE */
#define VT_CMD_F_BLOCKING 0x08
#define VT_CMD_F_MOVABLE 0x10    /* keys not at fixed positions (movablekeys) */
#define VT_CMD_F_CONTAINER 0x20  /* has subcommands: look up "name|sub" */
#define VT_CMD_F_NOKEYS 0x40     /* declares no key at all (a write of that kind is keyspace-wide) */
#define VT_CMD_F_DURABILITY 0x80 /* answers about durability (WAIT, WAITAOF): held like a write */

struct vt_cmd_entry {
    char name[VT_CMD_NAME];
    vt_u32 flags;
    vt_u16 first; /* legacy key positions (COMMAND's first/last/step): last < 0 counts from the end */
    vt_u16 step;
    vt_u32 last_plus; /* last + 0x8000 (last may be negative) */
    vt_u32 pad;
};

/* What the emulation counted, read by valkeytrace at window edges: cumulative. */
struct vt_offload_stats {
    vt_u32 magic;
    vt_u32 version;
    vt_u32 mode;
    vt_u32 hist_buckets;
    vt_u32 state;                /* VT_OFFLOAD_* state */
    vt_u32 fail_kind;            /* VT_OFFLOAD_FAIL_* once failed */
    vt_u32 fail_errno;
    vt_u32 table_entries;        /* command table entries the shim indexed (0: not yet) */
    vt_u64 jobs;                 /* write + fdatasync jobs done by the offload thread */
    vt_u64 job_bytes;            /* AOF bytes they wrote */
    vt_u64 offloaded_writes;     /* the main thread's AOF writes taken (returned at once) */
    vt_u64 offloaded_syncs;      /* its fdatasync/fsync calls on the AOF taken */
    vt_u64 queued_bytes;         /* AOF bytes queued so far */
    vt_u64 durable_bytes;        /* of which durable */
    vt_u64 commands;             /* client commands parsed */
    vt_u64 write_commands;       /* of which writes (durable: their replies held) */
    vt_u64 unknown_commands;     /* parsed before the table was ready, or not in it: treated as writes */
    vt_u64 replies;              /* client replies framed */
    vt_u64 held_replies;         /* replies held until what they answer was durable */
    vt_u64 held_write_replies;   /* of which answers to writes (SETs acknowledged durable) */
    vt_u64 held_read_replies;    /* of which reads of a key whose write was not yet durable */
    vt_u64 held_bytes;
    vt_u64 released_replies;     /* held replies written to their socket */
    vt_u64 dropped_replies;      /* held replies whose connection closed or failed first */
    vt_u64 early_replies;        /* the witness: replies that left before their commands' AOF bytes were durable */
    vt_u64 witness_checked;      /* replies the witness looked at */
    vt_u64 witness_overflow;     /* AOF keys the witness could not keep (its table full): it saw less */
    vt_u64 unsynced_conns;       /* connections whose replies could not be told apart (pub/sub, MONITOR,
                                    CLIENT REPLY, a protocol error): every reply held until all is durable */
    vt_u64 blocked_deliveries;   /* a released reply's socket would block: the rest kept for later */
    vt_u64 jobs_waited_sum;      /* over released replies: jobs completed between hold and release */
    vt_u64 replica_links;        /* connections that asked SYNC/PSYNC: a replica's link (#3381's cap: what the
                                    server writes to it waits for every AOF byte queued before) */
    vt_u64 stream_bytes;         /* bytes the server wrote to replica links */
    vt_u64 stream_held_bytes;    /* of which held until what came before was durable (committed) */
    vt_u64 obuf_closed;          /* clients closed over their client-output-buffer-limit (held replies counted) */
    vt_u64 exit_held_replies;    /* replies still held when the server ended (dropped with their connections) */
    vt_u64 shutdown_drains;      /* drains made on the server's own shutdown path (its final fsync) */
    vt_u64 signals;              /* SIGTERM/SIGINT the server received */
    vt_u64 stream_dirty_bytes;   /* of stream_bytes, sent while AOF bytes queued before them were not durable */
    vt_u64 rejected_writes;      /* writes answered with an error over the bound (--offload-overflow reject) */
    vt_u64 paused_reads;         /* client reads refused over the bound (--offload-overflow pause) */
    vt_u64 paused_ns;            /* time with at least one client's reads stopped */
    vt_u64 handoff_waits;        /* bio-write-block: the main thread's hand-offs that waited for a job to end */
    vt_u64 handoff_wait_ns;      /* how long they waited, together */
    vt_u64 postponed_writes;     /* main-write: the server's AOF writes postponed while a sync ran */
    vt_u64 forced_writes;        /* main-write: postponements ended at the 2 s limit, the sync still running */
    /* gauges: what the server holds right now (sampled, not differenced) */
    vt_u64 held_now;             /* replies held until what they answer is durable */
    vt_u64 behind_now;           /* replies held only behind those on their connection (order) */
    vt_u64 held_bytes_now;       /* the bytes of both (the reply bytes the server wrote, as its output buffer counts them) */
    vt_u64 dirty_keys_now;       /* keys written whose write is not yet durable (#3381's uncommitted keys) */
    vt_u64 pending_now;          /* client commands parsed, not yet answered */
    vt_u32 last_signal;          /* the last of them */
    vt_u32 design;               /* record --offload-design: VT_DESIGN_* (offload_design.h) */
    vt_u64 jobs_waited[VT_OFFLOAD_WAITED_MAX];
    struct vt_hist job_ns;       /* a job: from taking the batch to its fdatasync's return (delay included) */
    struct vt_hist hold_ns;      /* a held reply: from the server's write to the real one */
    struct vt_hist hold_read_ns; /* a held read of a not-yet-durable key */
    struct vt_hist postpone_ns;  /* main-write: a postponement, from its first write to the write that ended it */
    struct vt_hist main_write_ns; /* main-write: the main thread's writes of what it held (one sample a flush), timed
                                     here: a blocks-writes wait included, which the kernel's timing of write(2) misses */
};

/* Written by valkeytrace: the command table, and where the server logs (for its exit line). */
/* client-output-buffer-limit of one class, as the server's CONFIG says (0: no limit) */
struct vt_obuf_limit {
    vt_u64 hard_bytes;
    vt_u64 soft_bytes;
    vt_u64 soft_seconds;
};

/* overflow: what the offload does with more than max_pending replies held or pending */
#define VT_OVERFLOW_NONE 0
#define VT_OVERFLOW_PAUSE 1  /* stop reading from clients (their requests wait in the kernel's socket buffers) */
#define VT_OVERFLOW_REJECT 2 /* answer writes with an error, execute nothing */

/* replicas: the stream to a replica's link (record --offload-replicas) */
#define VT_REPLICAS_IMMEDIATE 0 /* #3381 as reviewed: it leaves at once (replicas may serve writes not durable here) */
#define VT_REPLICAS_COMMITTED 1 /* only what is durable here: every byte waits for the AOF bytes queued before it */
#define VT_REPLICAS_BLOCKING 2  /* it leaves at once; the replica holds reads past the committed offset (links[]) */

struct vt_offload_control {
    vt_u32 table_ready; /* set last, after the entries (release) */
    vt_u32 nentries;
    vt_u64 gather_ns;   /* record --offload-gather: a job waits this long after its first write */
    vt_u64 max_pending; /* record --offload-max-pending (0: no bound) */
    vt_u32 overflow;    /* VT_OVERFLOW_* */
    vt_u32 replicas;    /* VT_REPLICAS_*: what a replica's link gets before it is durable here */
    char logfile[256];  /* the server's logfile ("" = stdout) */
    struct vt_obuf_limit obuf_normal;  /* held replies count against these, as valkey counts its own buffer */
    struct vt_obuf_limit obuf_replica;
    struct vt_cmd_entry entries[VT_CMD_MAX];
};

/* Each replica's link, for the replica's own shim (--offload-replicas replica-blocking): what the stream
 * carried and how much of it is committed, the way the sync-replication design would send a committed
 * offset beside the stream (REPLCONF COMMIT, valkey #4035); on one host the replica reads it here. */
#define VT_REPLICA_LINKS 8
struct vt_replica_link {
    vt_u32 port;      /* the replica's end of the link (its local port); 0: a free entry */
    vt_u32 wake;      /* bumped (and futex-woken) when `committed` moves, or when the replica's shim has a
                         reply for its release thread to look at: the thread sleeps on it */
    vt_u64 sent;      /* stream bytes the server wrote to it since the replica's PSYNC */
    vt_u64 committed; /* of which every AOF byte queued before them is durable here */
};

struct vt_offload_shared {
    struct vt_offload_stats stats;
    struct vt_offload_control control;
    struct vt_replica_link links[VT_REPLICA_LINKS];
};

#endif
