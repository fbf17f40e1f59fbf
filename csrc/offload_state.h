/*
 * offload_state.h: the virtual offload's shared state (csrc/offload_state.c), read by the
 * connections (offload_conn.c) and the offload thread (offload.c).
 *
 * Positions are AOF bytes since the server started: `queued` what the main thread has written
 * (taken by the offload), `durable` what the offload thread has written and fdatasynced. A reply
 * that needs position p leaves when durable >= p. Lock order: a connection's lock, then `mu`.
 */
#ifndef VT_OFFLOAD_STATE_H
#define VT_OFFLOAD_STATE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "offload_layout.h"

/* a connection with held replies, linked into vt_off.held (under mu) */
struct vt_held_node {
    struct vt_held_node *next;
    int listed;
};

struct vt_off_state {
    int mode;
    pid_t main_pid;
    pthread_mutex_t mu;
    pthread_cond_t work; /* the offload thread waits here: a sync, a release, stop */
    pthread_cond_t done; /* broadcast after every job and delivery pass */
    uint64_t queued;     /* atomic */
    uint64_t durable;    /* atomic */
    int failed;          /* atomic: a write or fdatasync failed; nothing is released after it */
    int fail_errno, fail_kind;
    uint64_t failed_ns;
    /* under mu */
    uint64_t sync_wanted;
    int release_wanted, stopping;
    struct vt_held_node *held;
    struct vt_offload_stats *stats;
    struct vt_offload_control *control;
    ssize_t (*raw_write)(int, const void *, size_t); /* libc's: released replies bypass every wrapper */
    int wake_fd;         /* eventfd: wakes the offload thread out of its poll of blocked sockets */
    int polling;         /* under mu: the offload thread sleeps in that poll */
    int thread_done;     /* atomic: the offload thread has ended (nothing more will be written or released) */
    uint64_t read_bytes; /* atomic: bytes read from clients (the bound's mean request size) */
    int ack_written;     /* --emulate-offload ack-after-write: a job's replies leave after its write, before its sync */
    int unsynced_fd;     /* offload thread only: a dup of the fd whose sync follows the delivery (unsynced: one waits) */
    int unsynced;
};

extern struct vt_off_state vt_off;

static inline uint64_t vt_off_queued(void) { return __atomic_load_n(&vt_off.queued, __ATOMIC_ACQUIRE); }
static inline uint64_t vt_off_durable(void) { return __atomic_load_n(&vt_off.durable, __ATOMIC_ACQUIRE); }
static inline int vt_off_failed(void) { return __atomic_load_n(&vt_off.failed, __ATOMIC_ACQUIRE); }

static inline void vt_stat_add(vt_u64 *field, uint64_t n) { __atomic_fetch_add(field, n, __ATOMIC_RELAXED); }
/* replies held right now, for durability or behind those on their connection (what an exit drops) */
static inline uint64_t vt_off_held(void)
{
    return __atomic_load_n(&vt_off.stats->held_now, __ATOMIC_ACQUIRE) +
           __atomic_load_n(&vt_off.stats->behind_now, __ATOMIC_ACQUIRE);
}
/* replies held (negative: released or dropped): `waiting` for their AOF bytes to be durable, `behind` only
 * behind those on their connection (replies leave in order); `bytes` of them */
static inline void vt_off_held_add(int64_t waiting, int64_t behind, int64_t bytes)
{
    __atomic_add_fetch(&vt_off.stats->held_now, (uint64_t)waiting, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&vt_off.stats->behind_now, (uint64_t)behind, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&vt_off.stats->held_bytes_now, (uint64_t)bytes, __ATOMIC_RELAXED);
}

uint64_t vt_now_ns(void);
int vt_off_on_main_thread(void);
/* n samples of value v (the offload thread is every histogram's only writer) */
void vt_off_hist_add(struct vt_hist *h, uint64_t v, uint64_t n);
/* a connection now holds a reply that needs `need`: the offload thread will deliver it */
void vt_off_register_held(struct vt_held_node *node, uint64_t need);
/* wait (mu held) until the next broadcast of `done`, at most ms milliseconds (CLOCK_MONOTONIC) */
void vt_off_wait_done_locked(unsigned ms);
/* wait (mu held) for `work` until mono_ns (CLOCK_MONOTONIC) */
void vt_off_wait_work_until_locked(uint64_t mono_ns);
/* (mu held) the offload thread has work: its condition variable, and its eventfd while it polls */
void vt_off_kick_locked(void);
/* offload_exit.c: everything queued made durable and the replies it releases written (the server's shutdown path) */
void vt_off_drain_on_shutdown(void);
/* once, before any thread waits: the condition variables on CLOCK_MONOTONIC, the eventfd */
void vt_off_state_init(void);
/* one line in the server's log, as valkey writes its own (the control region's logfile, else stdout) */
void vt_off_log(const char *msg);
void vt_off_sync_written(void);
/* ack-after-write: fd's bytes written, its sync to follow the delivery (a dup of fd: 0; else synced here) */
int vt_off_wrote(int fd);

#endif
