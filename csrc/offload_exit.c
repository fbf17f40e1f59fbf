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

static void log_line(int fd, const char *msg)
{
    char when[64], line[512];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(when, sizeof(when), "%d %b %Y %H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%03d", (int)(ts.tv_nsec / 1000000));
    int len = snprintf(line, sizeof(line), "%d:M %s # %s\n", (int)getpid(), when, msg);
    if (len > 0 && vt_real.write(fd, line, (size_t)len) < 0)
        return;
}

/* The server never came back to the AOF to meet the error: end it as valkey would have */
static void exit_as_valkey(void)
{
    char msg[400];
    const char *path = vt_off.control ? vt_off.control->logfile : "";
    int fd = path[0] ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : 1;
    if (fd < 0)
        fd = 1;
    snprintf(msg, sizeof(msg), "valkeytrace virtual offload: the AOF %s on vt_offload failed (%s) and no AOF write "
             "came to meet it: the server ends as valkey would", vt_off.fail_kind == VT_OFFLOAD_FAIL_FSYNC ? "fdatasync" : "write",
             strerror(vt_off.fail_errno));
    log_line(fd, msg);
    if (vt_off.fail_kind == VT_OFFLOAD_FAIL_FSYNC) {
        snprintf(msg, sizeof(msg), "Can't persist AOF for fsync error when the AOF fsync policy is 'always': %s. Exiting...",
                 strerror(vt_off.fail_errno));
    } else {
        snprintf(msg, sizeof(msg), "Error writing to the AOF file: %s", strerror(vt_off.fail_errno));
        log_line(fd, msg);
        snprintf(msg, sizeof(msg), "Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...");
    }
    log_line(fd, msg);
    exit(1);
}

void vt_offload_main_idle(void)
{
    if (vt_off.mode && vt_off_failed() && vt_off_on_main_thread() && vt_now_ns() - vt_off.failed_ns > FAIL_GRACE_NS)
        exit_as_valkey();
}
