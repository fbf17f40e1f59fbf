/*
 * offload_links.h: each replica link's committed offset under the durable virtual offload
 * (csrc/offload_links.c), published in the shared file's links[] (offload_layout.h).
 */
#ifndef VT_OFFLOAD_LINKS_H
#define VT_OFFLOAD_LINKS_H

#include <stddef.h>
#include <stdint.h>

#include "offload_layout.h"

/* A stream byte's AOF bytes: those the server queued by the end of the event-loop iteration it was written in.
 * It may write a link inside the loop (its write handler, the socket full before) after running a write whose
 * AOF bytes it writes only in beforeSleep; so what it needs is known when the main thread next sleeps
 * (epoll_wait): until then it is VT_NEED_LOOP_END. */
#define VT_NEED_LOOP_END UINT64_MAX

struct conn;
void vt_links_attach(struct vt_replica_link *links);
/* the server wrote n stream bytes to replica link fd (their AOF bytes known at the loop's end) */
void vt_links_wrote(int fd, size_t n, uint64_t durable);
/* (the connection's lock held) c holds stream chunks that need VT_NEED_LOOP_END */
void vt_links_hold(struct conn *c);
/* the main thread is about to sleep (epoll_wait), or the server drains to exit: every AOF byte of what ran is
 * queued (`queued`): the stream written meanwhile needs that much */
void vt_links_loop_end(uint64_t queued);
/* shim.c's epoll_wait, before it sleeps: on the server's main thread, vt_links_loop_end(what is queued) */
void vt_offload_loop_end(void);
/* the AOF is durable up to `durable`: the links' committed offsets follow */
void vt_links_settle(uint64_t durable);
void vt_links_closed(int fd);

#endif
