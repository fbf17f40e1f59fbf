/*
 * offload_bound.h: the bound on what the durable offload keeps in the server (csrc/offload_bound.c;
 * record --offload-max-pending N --offload-overflow pause|reject), as the proposals in #3381's
 * review would put it: over N replies held (or queued behind held ones) or commands pending, either the
 * server stops reading from its clients (pause: their requests wait in the kernel's socket buffers) or
 * it answers writes with an error and executes nothing (reject; a client whose replies are held is not
 * read meanwhile).
 */
#ifndef VT_OFFLOAD_BOUND_H
#define VT_OFFLOAD_BOUND_H

#include <stddef.h>
#include <sys/epoll.h>

/* how many bytes a client's read may take now (0: none, the fd is paused), at most count; fd must be
 * a client connection the offload follows */
size_t vt_bound_read_budget(int fd, size_t count);
/* 1 when a write parsed now is to be rejected (reject mode, over the bound) */
int vt_bound_reject_write(void);
/* pending commands left out of the count (+1) or back in it (-1): one the server blocks on (BLPOP, WAIT,
 * WAITAOF) and those its connection sent after it (offload_req.c pushes them, offload_conn.c frames them) */
void vt_bound_uncounted(int64_t delta);
/* a whole multibulk request of this many bytes was read (the read budget's request size) */
void vt_bound_request_size(uint64_t bytes);
/* the server's epoll_ctl: its interest kept; a paused fd's EPOLLIN left out. The real call's result */
int vt_bound_epoll_ctl(int (*real)(int, int, int, struct epoll_event *), int epfd, int op, int fd,
                       struct epoll_event *ev);
/* before the main thread's epoll_wait: paused fds resumed once under the bound; its timeout, at most
 * 1 ms while any fd is paused (so the resumption is not late) */
int vt_bound_before_wait(int timeout);
void vt_bound_forget(int fd); /* fd closed or replaced */

#endif
