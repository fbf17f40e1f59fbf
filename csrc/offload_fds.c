/*
 * offload_fds.c: the virtual offload's own descriptors of the AOF files (offload_fds.h).
 */
#define _GNU_SOURCE
#include "offload_fds.h"

#include <fcntl.h>

#include "shim_io.h"
#include "valkeytrace.h"

#define RETIRED_MAX 64

static int own[VT_MAX_FD]; /* the duplicate + 1 (0: none); under vt_off.mu */
static struct { int fd; uint64_t at; } retired[RETIRED_MAX];
static int nretired;

int vt_aof_own(int fd)
{
    if (fd < 0 || fd >= VT_MAX_FD)
        return -1;
    if (!own[fd]) {
        VT_ENSURE(vt_real.close);
        int d = vt_real.fcntl(fd, F_DUPFD_CLOEXEC, 0); /* libc's: the shim's own wrappers never see it */
        if (d < 0)
            return -1;
        own[fd] = d + 1;
    }
    return own[fd] - 1;
}

int vt_aof_release(int fd, uint64_t at)
{
    if (fd < 0 || fd >= VT_MAX_FD || !own[fd])
        return 0;
    int d = own[fd] - 1;
    own[fd] = 0;
    if (nretired == RETIRED_MAX) { /* no room to keep it: the oldest goes now (its bytes may still be queued:
                                    * then the job meets EBADF and the offload fails, as a lost file would) */
        vt_real.close(retired[0].fd);
        for (int i = 1; i < nretired; i++)
            retired[i - 1] = retired[i];
        nretired--;
    }
    retired[nretired].fd = d;
    retired[nretired++].at = at;
    return 1;
}

void vt_aof_retire(uint64_t durable)
{
    int k = 0;
    for (int i = 0; i < nretired; i++) {
        if (retired[i].at <= durable)
            vt_real.close(retired[i].fd);
        else
            retired[k++] = retired[i];
    }
    nretired = k;
}
