/*
 * offload_design.h: the seam of the virtual offload's designs (record --offload-design; valkey #3381's
 * thread of 2026-05-26). offload.c takes the main thread's AOF bytes and syncs, runs the vt_offload
 * thread, marks durable and delivers; a design decides only how the bytes are handed off and what one
 * job of the vt_offload thread does with them. Each design is one file behind this one interface:
 *   offload_bio.c        bio-write: write + fdatasync on vt_offload, queued jobs collapse (the default)
 *   offload_bio_block.c  bio-write-block: the same, the main thread's hand-off waits while a job runs
 *   offload_main_write.c main-write: the main thread writes, vt_offload fdatasyncs; a write due while a
 *                        sync runs is postponed (the bytes kept) up to 2 s, then written whatever the disk does
 * A design calls only below it (offload_state.h, shim_io.h), never back into offload.c. Positions as
 * offload_state.h's: a job returns the position it makes durable; offload.c advances `durable` to it.
 */
#ifndef VT_OFFLOAD_DESIGN_H
#define VT_OFFLOAD_DESIGN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define VT_DESIGN_BIO_WRITE 0
#define VT_DESIGN_BIO_WRITE_BLOCK 1
#define VT_DESIGN_MAIN_WRITE 2

/* AOF bytes the server wrote, copied: fd is the offload's own duplicate (offload_fds.h) or the server's */
struct aof_chunk {
    struct aof_chunk *next;
    int fd;
    size_t len;
    char data[];
};

struct vt_design {
    const char *name;
    unsigned id; /* VT_DESIGN_* (the shared file's stats.design) */
    /* main thread, vt_off.mu held (a design may wait on vt_off.done): the server's AOF bytes, `queued` already
     * counting them; the chunk is the design's from now on */
    void (*handoff)(struct aof_chunk *c);
    /* main thread, mu not held: write what the design keeps for the main thread to write; force: now, whatever
     * runs (a close, a drain, the exit). 0, or -1 with *err and *kind (VT_OFFLOAD_FAIL_WRITE unless it sets it) */
    int (*flush)(int force, int *err, int *kind);
    /* main thread: the longest the event loop may sleep now, in ms (-1: no limit) */
    int (*wait_ms)(void);
    int (*has_job)(void);            /* vt_offload thread, mu held: a job to run now */
    void *(*take)(uint64_t *end);    /* vt_offload thread, mu held: take it; *end: the position it makes durable */
    int (*run)(void *job, int *err, int *kind); /* vt_offload thread, mu not held: 0, or -1 with errno and kind */
    void (*ended)(void);             /* vt_offload thread, mu held: the job ran (either way) */
    void (*drop)(void);              /* mu held: the offload failed: what is queued is never written */
    int (*pending)(void);            /* mu held: bytes handed off that no job has taken */
};

extern const struct vt_design vt_design_bio_write, vt_design_bio_write_block, vt_design_main_write;

/* the design of that name ($VALKEYTRACE_OFFLOAD_DESIGN), or NULL; a new design is one more line here */
static inline const struct vt_design *vt_design_named(const char *name)
{
    const struct vt_design *const all[] = {&vt_design_bio_write, &vt_design_bio_write_block, &vt_design_main_write};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (!strcmp(name, all[i]->name))
            return all[i];
    return NULL;
}

/* offload_bio.c's queue, which bio-write-block shares */
void vt_bio_handoff(struct aof_chunk *c);
int vt_bio_has_job(void);
void *vt_bio_take(uint64_t *end);
int vt_bio_run(void *job, int *err, int *kind);
void vt_bio_drop(void);
int vt_bio_pending(void);
int vt_design_no_flush(int force, int *err, int *kind);
int vt_design_no_wait(void);
void vt_design_no_end(void);
/* write every byte of len at fd (EINTR retried; a short write continued); 0, or -1 with *err */
int vt_design_write_all(int fd, const char *p, size_t len, int *err);

#endif
