/*
 * offload_conn.h: the virtual offload's client connections (csrc/offload_conn.c).
 *
 * Each connection the server accepted is followed both ways: its requests are parsed into a FIFO
 * of commands (vt_resp.h), classified by the server's own command table (vt_cmds.h); its replies
 * are framed, each popping the command it answers. A reply whose command must not be answered
 * before durability (a write, a read of a key whose write is not durable yet) is held from its
 * first byte, with everything after it on that connection, until the offload thread delivers it.
 * The witness looks at every reply that leaves, by another way (the AOF's own keys).
 */
#ifndef VT_OFFLOAD_CONN_H
#define VT_OFFLOAD_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "offload_state.h"

typedef ssize_t (*vt_writev_fn)(int, const struct iovec *, int);

void vt_conn_accepted(int fd);
int vt_conn_is_client(int fd);
/* 1: a client connection whose next reply may be held: it holds replies, has commands not answered, or is
 * inside one not rejected (the bound's reject does not read it: a rejected write's error would wait behind) */
int vt_conn_may_hold(int fd);
uint64_t vt_conn_bulk_left(int fd); /* bytes still to come of the argument its requests are in (the bound's reads) */
/* a write to a client connection: 1 when handled here (written, partly written, or held), *ret
 * what the caller returns (errno set when -1) */
int vt_conn_take(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret, vt_writev_fn real);
/* before fd is closed or replaced: what it holds is delivered once durable (never when the
 * offload failed), then its state is reset. 1 when fd was a client connection. */
int vt_conn_close(int fd);

/* the offload thread: write what this connection may release now. Returns 0 (nothing held),
 * 1 (holding what is not durable yet) or 2 (the socket would block: try again later). */
int vt_conn_deliver(struct vt_held_node *node, int *fd);
/* the offload has failed or the process ends: what is held is dropped (never sent) */
void vt_conn_drop(struct vt_held_node *node);

#endif
