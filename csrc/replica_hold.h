/*
 * replica_hold.h: a replica's side of --offload-replicas replica-blocking (csrc/replica_hold.c), part of
 * the shim preloaded into each replica valkeytrace launches. The replica follows its link to the primary
 * (the connection it sent PSYNC on: every byte read on it counted from there), parses the stream past the
 * full sync's payload and keeps, per key slot, the link offset of the last write to it. The primary's shim
 * publishes, per link, the offset up to which the stream is durable on the primary (offload_links.c), read
 * here from its shared file ($VALKEYTRACE_REPLICA_COMMIT). A reply to a client that read a key written past
 * that offset is held in the shim (the server sees it written) until the offset passes; replies after it
 * on the same connection wait behind it (order). Nothing else changes: the stream, the replica's own AOF.
 */
#ifndef VT_REPLICA_HOLD_H
#define VT_REPLICA_HOLD_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

int vt_replica_init(void);     /* from the shim's constructor: 1 when $VALKEYTRACE_REPLICA_COMMIT is set */
int vt_replica_enabled(void);
void vt_replica_after_fork_child(void); /* a fork child (the server's RDB or AOF rewrite) follows nothing */
void vt_replica_read(int fd, const void *buf, ssize_t n); /* after the server's read */
/* the server writes: 1 when taken (*ret set: held, or the link's PSYNC noted and written) */
int vt_replica_writev(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret);
void vt_replica_accepted(int fd);
void vt_replica_close(int fd); /* before fd is closed or replaced: what it held is dropped */

#endif
