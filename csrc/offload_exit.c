/*
 * offload_exit.c: a failed virtual offload ends the server as valkey would have (offload.c).
 *
 * When the offload thread's AOF write or fdatasync fails, nothing more is released and the error
 * reaches the server at its next AOF write or fdatasync (valkey with appendfsync always then logs
 * it and exits 1). When no such call comes within FAIL_GRACE_NS (every client waits on a held
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
