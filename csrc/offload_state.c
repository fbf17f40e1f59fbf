/*
 * offload_state.c: the virtual offload's shared state (offload_state.h).
 */
#define _GNU_SOURCE
#include "offload_state.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct vt_offload_stats local_stats;

struct vt_off_state vt_off = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .stats = &local_stats,
};

static __thread pid_t my_tid;

uint64_t vt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int vt_off_on_main_thread(void)
{
    if (!my_tid)
        my_tid = (pid_t)syscall(SYS_gettid);
    return my_tid == vt_off.main_pid;
}

void vt_off_hist_add(struct vt_hist *h, uint64_t v, uint64_t n)
{
    if (!n)
        return;
    __atomic_fetch_add(&h->buckets[vt_hist_bucket_index(v)], n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->sum_ns, v * n, __ATOMIC_RELAXED);
    if (v > __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED))
        __atomic_store_n(&h->max_ns, v, __ATOMIC_RELAXED);
    uint64_t mn = __atomic_load_n(&h->min_ns, __ATOMIC_RELAXED);
    if (!mn || v < mn)
        __atomic_store_n(&h->min_ns, v, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->count, n, __ATOMIC_RELEASE); /* last: a reader that sees count sees the bucket */
}

void vt_off_register_held(struct vt_held_node *node, uint64_t need)
{
    pthread_mutex_lock(&vt_off.mu);
    if (!node->listed) {
        node->listed = 1;
        node->next = vt_off.held;
        vt_off.held = node;
    }
    if (need <= vt_off_durable()) { /* durable already (a job ended meanwhile): no job will release it */
        vt_off.release_wanted = 1;
        pthread_cond_signal(&vt_off.work);
    }
    pthread_mutex_unlock(&vt_off.mu);
}

void vt_off_wait_done_locked(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(&vt_off.done, &vt_off.mu, &ts);
}
