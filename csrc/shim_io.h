/*
 * shim_io.h: the shim's timed I/O path (csrc/shim_io.c): libc's real functions, the shared
 * region's per-thread histograms, the emulated fsync delay, and the fd classification that tells
 * an AOF write from a socket write. csrc/shim.c's wrappers and the virtual offload's thread
 * (csrc/offload.c) call it; it calls neither.
 */
#ifndef VT_SHIM_IO_H
#define VT_SHIM_IO_H

#include <stddef.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*fsync_fn)(int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);
typedef int (*epoll_ctl_fn)(int, int, int, struct epoll_event *);
typedef int (*close_fn)(int);
typedef int (*close_range_fn)(unsigned int, unsigned int, int);
typedef int (*fclose_fn)(FILE *);
typedef int (*dup_fn)(int);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*fcntl_fn)(int, int, ...);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

/* libc's functions (dlsym RTLD_NEXT), resolved once by vt_io_resolve() */
struct vt_real {
    fsync_fn fsync, fdatasync;
    write_fn write;
    read_fn read;
    pwrite_fn pwrite, pwrite64;
    writev_fn writev;
    epoll_wait_fn epoll_wait;
    epoll_ctl_fn epoll_ctl;
    close_range_fn close_range;
    fclose_fn fclose;
    dup_fn dup;
    dup2_fn dup2;
    dup3_fn dup3;
    fcntl_fn fcntl;
    accept_fn accept;
    accept4_fn accept4;
    close_fn close; /* last: resolved when unset */
};
extern struct vt_real vt_real;

#define VT_ENSURE(fn)                       \
    do {                                    \
        if (__builtin_expect(!(fn), 0))     \
            vt_io_resolve();                \
    } while (0)

void vt_io_resolve(void);
void vt_io_init(void);        /* the constructor's: delay spec, shared region */
int vt_io_recording(void);    /* a region is mapped (atfork handler needed) */
void vt_io_after_fork_child(void);
ssize_t vt_io_write(int fd, const void *buf, size_t n); /* timed as an AOF or a socket write by fd */
ssize_t vt_io_writev(int fd, const struct iovec *iov, int iovcnt);
ssize_t vt_io_pwrite(pwrite_fn fn, int fd, const void *buf, size_t n, off_t off);
int vt_io_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout);
void vt_io_forget_fd(int fd); /* fd's number may name another file now */
/* the real call plus the emulated delay, timed: what the eBPF backend probes as the call */
int vt_shim_fdatasync(int fd);
int vt_shim_fsync(int fd);
/* a file valkeytrace made, mapped shared when it holds at least min_size bytes; NULL otherwise */
void *vt_map_shared(const char *path, size_t min_size, size_t *size);

#endif
