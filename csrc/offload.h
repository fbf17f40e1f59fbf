/*
 * offload.h: the virtual offload (record --emulate-offload), part of the shim: the hooks csrc/shim.c
 * calls (its shared file's layout is offload_layout.h). The hooks return 1 when they took the call.
 *
 * Modules (each calls only those below it; no circle):
 *   shim.c -> offload.c (the AOF queue, the vt_offload thread, close/drain/failure),
 *             offload_exit.c (a failure the server never met: valkey's exit)
 *          -> offload_bound.c (--offload-max-pending: pause reads, reject writes)
 *          -> offload_conn.c (client connections: what is held, framing, the witness)
 *          -> offload_state.c (shared state) -> vt_cmds.c (tables) -> vt_resp.c (parsers)
 *   offload.c -> shim_io.c (the timed write and fdatasync the tracers see on vt_offload)
 *   offload.c -> offload_bio.c, offload_bio_block.c, offload_main_write.c (record --offload-design: how the
 *             bytes are handed off and what a job does, one file each behind offload_design.h)
 */
#ifndef VT_OFFLOAD_H
#define VT_OFFLOAD_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "offload_layout.h"

int vt_offload_init(void); /* from the shim's constructor: reads $VALKEYTRACE_OFFLOAD; exits on failure */
int vt_offload_enabled(void);
void vt_offload_after_fork_child(void);
int vt_offload_sync(int fd, int *ret); /* fdatasync/fsync: 1 when taken (*ret: 0, or -1 with errno) */
int vt_offload_write(int fd, const void *buf, size_t n, ssize_t *ret);
int vt_offload_writev(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret);
int vt_offload_before_wait(int timeout); /* main thread, before epoll_wait: the design's due write; its timeout */
/* offload_conn.c's: */
void vt_offload_read(int fd, void *buf, ssize_t n); /* after a read: parses client requests (reject: renames writes) */
void vt_offload_accepted(int fd);           /* a client connection the server accepted */
int vt_offload_client(int fd);              /* a client's connection (not a replica's link): bound by pause */
void vt_offload_close(int fd);              /* before fd is closed or replaced: drains what it has */
void vt_offload_main_idle(void);            /* main thread, after epoll_wait: ends a failed server */
void vt_offload_signal(int sig, int entering); /* around the server's SIGTERM/SIGINT handler (shim.c) */
void vt_offload_shutdown_aborted(void);         /* a client asked SHUTDOWN ABORT: the signal's shutdown is off */

#endif
