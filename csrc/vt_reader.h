/*
 * vt_reader.h: readers on a replica inside the open-loop client's loop (record --replica-get-clients):
 * N connections to a replica, one GET in flight each, each GET of the key the writers sent last (a reader
 * that follows the writers: when the replica holds a value its primary has not made durable, it is the
 * one read). Each reply's value carries its SET's sequence (the writer's CLOCK_MONOTONIC plus the launch's epoch, vt_load.h): kept per
 * key (the largest seen: the phantom check's input) and per read (its sequence, send and receive
 * moments: the dirty-read check's), with the reads' latency in a histogram of their own.
 */
#ifndef VT_READER_H
#define VT_READER_H

#include <stdint.h>

#include "hist.h"
#include "vt_arrivals.h"

#define VT_READER_TAG 0x80000000u /* epoll data of a reader's connection: this bit and its index */
/* a reader sends its next GET at least this long after its last: ~1,000 a second each (unpaced, 10 readers
 * on loopback asked 150,000 a second, and the replica's tracer lost most of its events to them) */
#define VT_READER_GAP_NS 1000000ull

struct vt_reader_conn {
    int fd;
    struct vt_reply reply; /* the reply being read (vt_arrivals.h) */
    uint64_t sent, last;
    uint32_t key, head_n;
    char head[16];
};

struct vt_reader_stats {
    uint64_t reads, misses, logged; /* GETs answered whose send was in the window; of which nil; of which logged */
    uint64_t log_stride;            /* the log keeps every log_stride-th read with a sequence (halved when full) */
    uint64_t with_seq;              /* reads in the window whose value carried a sequence */
    struct vt_hist latency;         /* send -> reply, of those */
};

struct vt_reader {
    struct vt_reader_conn *c;
    int n;
    uint64_t ws, we;     /* the window: a read counts when sent in it; none is sent after it */
    uint64_t *seen;      /* per key: the largest sequence read (NULL: not kept) */
    uint32_t keyspace;
    uint64_t *log;       /* 3 per read: sequence, send, receive (CLOCK_MONOTONIC; the sequence that plus seq_epoch) */
    uint64_t log_cap;    /* reads the log holds */
    struct vt_reader_stats *st;
};

/* n connections to host:port added to ep; 0 or an errno */
int vt_reader_open(struct vt_reader *r, int ep, const char *host, int port, int n);
/* every idle reader sends a GET of key (before the window's end) */
void vt_reader_kick(struct vt_reader *r, uint32_t key, uint64_t now);
/* bytes read off reader i (its epoll data without VT_READER_TAG): replies parsed; -1 when it closed */
int vt_reader_input(struct vt_reader *r, uint32_t i, const char *buf, long n, uint64_t now);
void vt_reader_close(struct vt_reader *r);

#endif
