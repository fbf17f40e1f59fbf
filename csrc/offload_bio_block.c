/*
 * offload_bio_block.c: the design bio-write-block (offload_design.h): bio-write's queue and jobs, but the
 * main thread's hand-off waits while a job runs ("the enqueue blocks while the thread is busy", #3381's
 * option 2 without collapse): what a job carries is what came while none ran. Counted: the hand-offs that
 * waited and how long (stats.handoff_waits, handoff_wait_ns).
 */
#define _GNU_SOURCE
#include "offload_design.h"

#include <stdlib.h>

#include "offload_state.h"

static int job_running; /* under vt_off.mu */

static void handoff(struct aof_chunk *c)
{
    if (job_running && !vt_off_failed()) {
        uint64_t t0 = vt_now_ns();
        while (job_running && !vt_off_failed() && !__atomic_load_n(&vt_off.thread_done, __ATOMIC_ACQUIRE))
            vt_off_wait_done_locked(50);
        vt_stat_add(&vt_off.stats->handoff_waits, 1);
        vt_stat_add(&vt_off.stats->handoff_wait_ns, vt_now_ns() - t0);
    }
    if (vt_off_failed()) { /* failed meanwhile: never written, as everything queued */
        free(c);
        return;
    }
    vt_bio_handoff(c);
}

static void *take(uint64_t *end)
{
    job_running = 1;
    return vt_bio_take(end);
}

static void ended(void)
{
    job_running = 0;
    pthread_cond_broadcast(&vt_off.done); /* a hand-off waits for it */
}

const struct vt_design vt_design_bio_write_block = {
    "bio-write-block", VT_DESIGN_BIO_WRITE_BLOCK, handoff, vt_design_no_flush, vt_design_no_wait, vt_bio_has_job,
    take, vt_bio_run, ended, vt_bio_drop, vt_bio_pending,
};
