/*
 * offload_bio.c: the design bio-write (offload_design.h), the virtual offload as it always ran: the main
 * thread's AOF bytes are queued and return at once; one job on vt_offload takes everything queued, writes it
 * (short writes completed) and fdatasyncs it; what is queued while a job runs collapses into the next job.
 * Its queue is shared with bio-write-block (offload_bio_block.c).
 */
#define _GNU_SOURCE
#include "offload_design.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "offload_state.h"
#include "shim_io.h"

static struct aof_chunk *aof_head, *aof_tail; /* under vt_off.mu */

void vt_bio_handoff(struct aof_chunk *c)
{
    if (aof_tail)
        aof_tail->next = c;
    else
        aof_head = c;
    aof_tail = c;
}

int vt_bio_has_job(void) { return aof_head && vt_off.sync_wanted > vt_off_durable(); }

void *vt_bio_take(uint64_t *end)
{
    struct aof_chunk *batch = aof_head;
    *end = vt_off.queued;
    aof_head = aof_tail = NULL;
    return batch;
}

int vt_design_write_all(int fd, const char *p, size_t len, int *err)
{
    for (size_t off = 0; off < len;) {
        ssize_t w = vt_io_write(fd, p + off, len - off);
        if (w > 0)
            off += (size_t)w;
        else if (!(w < 0 && errno == EINTR))
            return *err = w < 0 ? errno : ENOSPC, -1;
    }
    return 0;
}

/* write (every byte) and fdatasync a batch, in order; 0, or -1 with *err and *kind */
int vt_bio_run(void *job, int *err, int *kind)
{
    int fd = -1, rc = 0;
    off_t start = -1;
    for (struct aof_chunk *c = job, *next; c; c = next) {
        next = c->next;
        if (rc == 0 && c->fd != fd) {
            struct stat st;
            if (fd >= 0 && vt_shim_fdatasync(fd) != 0) /* the file changed (AOF rotation): the old one first */
                *err = errno, *kind = VT_OFFLOAD_FAIL_FSYNC, rc = -1;
            fd = c->fd;
            start = fstat(fd, &st) == 0 ? st.st_size : -1;
        }
        if (rc == 0 && vt_design_write_all(fd, c->data, c->len, err) != 0) {
            *kind = VT_OFFLOAD_FAIL_WRITE;
            rc = -1;
            if (start >= 0 && ftruncate(fd, start) != 0) /* as valkey removes a short write */
                start = -1;
        }
        free(c);
    }
    if (rc == 0 && fd >= 0 && (vt_off.ack_written ? vt_off_wrote(fd) : vt_shim_fdatasync(fd)))
        *err = errno, *kind = VT_OFFLOAD_FAIL_FSYNC, rc = -1;
    return rc;
}

void vt_bio_drop(void)
{
    while (aof_head) { /* never written: nothing after a failure is */
        struct aof_chunk *c = aof_head;
        aof_head = c->next;
        free(c);
    }
    aof_tail = NULL;
}

int vt_bio_pending(void) { return aof_head != NULL; }
int vt_design_no_flush(int force, int *err, int *kind) { return 0; }
int vt_design_no_wait(void) { return -1; }
void vt_design_no_end(void) {}

const struct vt_design vt_design_bio_write = {
    "bio-write", VT_DESIGN_BIO_WRITE, vt_bio_handoff, vt_design_no_flush, vt_design_no_wait, vt_bio_has_job,
    vt_bio_take, vt_bio_run, vt_design_no_end, vt_bio_drop, vt_bio_pending,
};
