/*
 * vt_load.h: valkeytrace's open-loop client (record --rate): requests due on a schedule (Poisson or
 * uniform arrivals at a rate), each sent when due over a fixed pool of connections with one request
 * in flight each (a request due while all of them wait is held until one is free: wrk2's model), or
 * over a pool that grows while the server does not answer (then pipelines); its latency measured
 * from the moment it was due
 * (corrected for coordinated omission) and from the moment it was sent (service time), into two
 * log-linear histograms (hist.h). The window holds exactly rate x duration requests (Poisson
 * spacings normalized to it: the offered rate is the rate asked for, not a draw of it).
 * Single-threaded, one epoll loop; built into the cffi module.
 */
#ifndef VT_LOAD_H
#define VT_LOAD_H

#include <stdint.h>

#include "valkeytrace.h"
#include "vt_reader.h"

#define VT_LOAD_GET 0
#define VT_LOAD_SET 1
#define VT_LOAD_POISSON 0
#define VT_LOAD_UNIFORM 1

struct vt_load_config {
    const char *host;
    int port;
    int op;                 /* VT_LOAD_GET / VT_LOAD_SET */
    uint32_t keyspace;      /* keys key:000000000000 .. keyspace - 1, drawn at random */
    uint32_t value_size;    /* SET's value */
    double rate;            /* requests due per second; 0: closed loop (each connection sends its next request
                             * as its reply comes, latency from the send: the benchmark's model) */
    int arrival;            /* VT_LOAD_POISSON / VT_LOAD_UNIFORM */
    int conns;              /* connections opened first */
    int max_conns;          /* the pool grows to this while requests are due and every connection waits */
    int hold;               /* 1: at max_conns, a due request waits in the client for a free connection
                             * (one in flight per connection); 0: it is pipelined behind another */
    uint64_t warmup_ns;     /* due before the window: sent, not counted */
    uint64_t duration_ns;   /* the measured window: requests due in it are counted */
    uint64_t grace_ns;      /* after the window, how long its requests may still be answered */
    uint64_t drain_ns;      /* answered this soon after the window, a request counts toward the achieved rate */
    uint64_t late_ns;       /* a request sent this long after it was due is late */
    uint64_t seed;
    int marker_fd;          /* "B\n" written when the window begins, "E\n" when its last request is due (-1: none) */
    uint64_t *acked;        /* SET with --verify-durability: keyspace entries, each the sequence (in the value's first
                             * 16 hex digits) the reload must hold at least: the largest floor (vt_inflight.h) of the
                             * key's acknowledged SETs, raised as replies come; NULL: none */
    uint64_t cut_after_ns;  /* record --verify-durability power-cut: acknowledgments read later than the window's start
                             * + this are not kept in acked (the power cut's moment); 0: all kept */
    const void *stalls;     /* the shim's stall log (stall_log.h), mapped: latencies split by stall; NULL: none */
    const char *replica_host; /* record --replica-get-clients: readers on this replica (vt_reader.h) */
    int replica_port;
    int readers;            /* 0: none (with readers, SET values carry their sequence, as with acked) */
    uint64_t *seen;         /* keyspace entries: per key the largest sequence a reader saw (NULL: not kept) */
    uint64_t *reads;        /* 3 x reads_cap: per read in the window, its value's sequence, send, receive */
    uint64_t reads_cap;
    uint64_t seq_epoch;     /* a SET's sequence: CLOCK_MONOTONIC's ns plus this (the launch's, one for all its runs:
                             * its wall clock minus its CLOCK_MONOTONIC, taken once), so a clock step never reorders */
    const uint32_t *keys;   /* record --cluster: the key numbers drawn from (a shard's: their slots on its node); NULL:
                             * 0 .. keyspace - 1 */
    uint32_t nkeys;
    int survive;            /* record --failover: a connection its server closes is dropped (what it had in flight
                             * counted in errors) and the run goes on without it, not ended */
};

struct vt_load_result {
    uint64_t window_start_ns, window_end_ns; /* CLOCK_MONOTONIC */
    uint64_t due, sent, answered, late, errors, unanswered; /* late: due in the window and answered after a
                                                              * send late_ns or more after due, or never sent */
    uint64_t answered_in_window;  /* replies that came during the window */
    uint64_t answered_drained;    /* replies that came by the window's end + drain_ns (the achieved rate) */
    uint64_t first_answer_ns, last_answer_ns; /* the first and last of those (the span they were answered over) */
    uint64_t conns, pipelined;    /* connections opened; requests sent behind another on one */
    uint64_t held, held_max;      /* requests that waited for a free connection; the most waiting at once */
    uint64_t rejected;            /* error replies (of errors): a server that refused the request */
    uint64_t acked;               /* SETs acknowledged (+OK) whose sequence was kept (cfg->acked) */
    struct vt_hist corrected;     /* due -> its reply read */
    struct vt_hist service;       /* sent -> its reply read */
    struct vt_hist in_stall;      /* corrected, of the requests due during an injected stall (cfg->stalls) */
    struct vt_hist outside;       /* corrected, of those due outside every stall */
    struct vt_reader_stats replica; /* the replica readers' GETs (cfg->readers) */
    int error;                    /* 0, or an errno: could not connect */
    char message[160];
};

int vt_load_run(const struct vt_load_config *cfg, struct vt_load_result *res);

#endif
