/*
 * offload_exit.c: the virtual offload's ends (offload.c): the drain on the server's own shutdown path, and a
 * failed offload ending the server as valkey would have.
 *
 * When the offload thread's AOF write or fdatasync fails, nothing more is released and the error
 * reaches the server where valkey's own would: a failed write at its next AOF write, a failed
 * fdatasync at its next fdatasync (the write before it accepted, never queued), so valkey with
 * appendfsync always logs that error and exits 1. When no such call comes within FAIL_GRACE_NS (every client waits on a held
 * reply, so nothing writes), the main thread, back from epoll_wait, writes valkey's own log lines
 * where the server logs (the control region's logfile, else stdout) and exits 1.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "offload.h"
#include "offload_links.h"
#include "offload_state.h"
#include "shim_io.h"

#define FAIL_GRACE_NS 200000000ull

/* The server never came back to the AOF to meet the error: end it as valkey would have */
static void exit_as_valkey(void)
{
    char msg[400];
    snprintf(msg, sizeof(msg), "valkeytrace virtual offload: the AOF %s on vt_offload failed (%s) and no AOF write "
             "came to meet it: the server ends as valkey would", vt_off.fail_kind == VT_OFFLOAD_FAIL_FSYNC ? "fdatasync" : "write",
             strerror(vt_off.fail_errno));
    vt_off_log(msg);
    if (vt_off.fail_kind == VT_OFFLOAD_FAIL_FSYNC) {
        snprintf(msg, sizeof(msg), "Can't persist AOF for fsync error when the AOF fsync policy is 'always': %s. Exiting...",
                 strerror(vt_off.fail_errno));
    } else {
        snprintf(msg, sizeof(msg), "Error writing to the AOF file: %s", strerror(vt_off.fail_errno));
        vt_off_log(msg);
        snprintf(msg, sizeof(msg), "Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...");
    }
    vt_off_log(msg);
    exit(1);
}

void vt_offload_main_idle(void)
{
    if (vt_off.mode && vt_off_failed() && vt_off_on_main_thread() && vt_now_ns() - vt_off.failed_ns > FAIL_GRACE_NS)
        exit_as_valkey();
}

/* The server's own shutdown path (prepareForShutdown's final AOF flush and fsync, after a SIGTERM or
 * SIGINT; never a signal handler): everything queued made durable, the replies it releases written
 * (a client that reads nothing gets a second), before the server goes on to exit. */
void vt_off_drain_on_shutdown(void)
{
    uint64_t until = vt_now_ns() + 1000000000ull;
    pthread_mutex_lock(&vt_off.mu);
    uint64_t target = vt_off.queued;
    vt_off.sync_wanted = target;
    vt_off_kick_locked();
    pthread_mutex_unlock(&vt_off.mu);
    vt_links_loop_end(target); /* the server's last AOF flush is queued: the stream it wrote needs no more */
    pthread_mutex_lock(&vt_off.mu);
    while (!vt_off_failed() && !__atomic_load_n(&vt_off.thread_done, __ATOMIC_ACQUIRE) && vt_off_durable() < target)
        vt_off_wait_done_locked(50);
    while (vt_off.held && !vt_off_failed() && !__atomic_load_n(&vt_off.thread_done, __ATOMIC_ACQUIRE) &&
           vt_now_ns() < until) {
        vt_off.release_wanted = 1;
        vt_off_kick_locked();
        vt_off_wait_done_locked(10);
    }
    pthread_mutex_unlock(&vt_off.mu);
    vt_stat_add(&vt_off.stats->shutdown_drains, 1);
}
