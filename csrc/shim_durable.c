/*
 * shim_durable.c: the shim's record of what each fsync/fdatasync made durable (record
 * --verify-durability power-cut), with no privileges: with $VALKEYTRACE_DURABLE_LOG (a file valkeytrace
 * made, shim_durable.h's layout) every real sync the server makes (its own threads, the virtual offload's,
 * a forked child's: the mapping is shared across fork) logs its file's inode and size as it is entered and
 * whether it succeeded; a rename and an open that creates a file log the inode the name now points at (a
 * name counts as present after a power cut only once an fsync of its directory began after it). The
 * records live in a shared mapping, so a SIGKILL loses none. Without the variable every hook is a no-op.
 */
#define _GNU_SOURCE
#include "shim_durable.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim_io.h"

typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned int);
typedef int (*openat_fn)(int, const char *, int, ...);

static struct vt_dur_log *dlog;

void vt_dur_init(void)
{
    size_t size = 0;
    struct vt_dur_log *l = vt_map_shared(getenv("VALKEYTRACE_DURABLE_LOG"), sizeof(struct vt_dur_log), &size);
    if (l && l->magic == VT_DUR_MAGIC && size >= sizeof(*l) + l->capacity * sizeof(struct vt_dur_event)) {
        uint64_t none = 0;
        __atomic_compare_exchange_n(&l->mapped_by, &none, (uint64_t)getpid(), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        dlog = l;
    }
}

static void put(uint32_t kind, uint64_t ino, uint64_t value, const char *path)
{
    struct timespec ts;
    uint64_t i = __atomic_fetch_add(&dlog->next, 1, __ATOMIC_RELAXED);
    if (i >= dlog->capacity)
        return; /* full: the reader says so (next > capacity) */
    struct vt_dur_event *e = &dlog->ev[i];
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->ino = ino, e->value = value, e->tid = (uint32_t)syscall(SYS_gettid);
    if (path) { /* its last 31 bytes, as the kernel's probe keeps them */
        size_t n = strlen(path);
        strncpy(e->name, path + (n > sizeof(e->name) - 1 ? n - (sizeof(e->name) - 1) : 0), sizeof(e->name) - 1);
    }
    e->kind = kind;
    __atomic_store_n(&e->ns, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, __ATOMIC_RELEASE);
}

uint64_t vt_dur_sync_begin(int fd)
{
    struct stat st;
    int saved = errno;
    if (!dlog || fstat(fd, &st) != 0) {
        errno = saved;
        return 0;
    }
    put(VT_DUR_SYNC_BEGIN, (uint64_t)st.st_ino, (uint64_t)st.st_size, NULL);
    errno = saved;
    return (uint64_t)st.st_ino;
}

void vt_dur_sync_end(uint64_t ino, int ret)
{
    if (dlog && ino)
        put(VT_DUR_SYNC_END, ino, ret == 0, NULL);
}

/* after a rename or a creating open succeeded: the inode the name points at now */
static void named(uint32_t kind, int dirfd, const char *path)
{
    struct stat st;
    int saved = errno;
    if (dlog && path && fstatat(dirfd, path, &st, 0) == 0)
        put(kind, (uint64_t)st.st_ino, 0, path);
    errno = saved;
}

EXPORT int rename(const char *from, const char *to)
{
    static rename_fn real;
    if (!real)
        real = (rename_fn)dlsym(RTLD_NEXT, "rename");
    int r = real(from, to);
    if (r == 0)
        named(VT_DUR_RENAME, AT_FDCWD, to);
    return r;
}

EXPORT int renameat(int fd1, const char *from, int fd2, const char *to)
{
    static renameat_fn real;
    if (!real)
        real = (renameat_fn)dlsym(RTLD_NEXT, "renameat");
    int r = real(fd1, from, fd2, to);
    if (r == 0)
        named(VT_DUR_RENAME, fd2, to);
    return r;
}

EXPORT int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned int flags)
{
    static renameat2_fn real;
    if (!real)
        real = (renameat2_fn)dlsym(RTLD_NEXT, "renameat2");
    int r = real(fd1, from, fd2, to, flags);
    if (r == 0)
        named(VT_DUR_RENAME, fd2, to);
    return r;
}

/* open/openat with O_CREAT: a CREATE when the name did not exist before */
static int opened(int dirfd, const char *path, int flags, mode_t mode)
{
    static openat_fn real;
    if (!real)
        real = (openat_fn)dlsym(RTLD_NEXT, "openat");
    int fresh = dlog && (flags & O_CREAT) && faccessat(dirfd, path, F_OK, 0) != 0;
    int fd = real(dirfd, path, flags, mode);
    if (fd >= 0 && fresh)
        named(VT_DUR_CREATE, dirfd, path);
    return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

EXPORT int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return opened(AT_FDCWD, path, flags, mode);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return opened(dirfd, path, flags, mode);
}

EXPORT int open64(const char *path, int flags, ...) __attribute__((alias("open")));
EXPORT int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));
