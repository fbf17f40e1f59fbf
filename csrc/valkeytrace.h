/*
 * valkeytrace.h: the layouts every side of valkeytrace shares.
 *
 * Included by the native module (csrc/hist.c, through cffi), by the bcc probe programs in
 * probes/ (compiled by clang to BPF at run time) and by the LD_PRELOAD shim. Keep it free of
 * libc: BPF programs cannot call it. Everything here is fixed-width and naturally aligned, so
 * the numpy dtypes in valkeytrace/layout.py can mirror it (a unit test checks sizes and
 * offsets through cffi).
 *
 * Latency histogram: log-linear (HDR style). Values are nanoseconds.
 *   - values below VT_HIST_SUB_COUNT (128 ns) have a bucket each (exact);
 *   - above, each power of two [2^k, 2^(k+1)) is split in VT_HIST_HALF (64) equal buckets, so a
 *     bucket is at most 1/64 of its lower bound wide and its midpoint is within 0.79% of any
 *     value in it;
 *   - values at or above 2^VT_HIST_MAX_BITS ns (~18 minutes) land in the last bucket.
 */
#ifndef VALKEYTRACE_H
#define VALKEYTRACE_H

#define VT_MAX_FD 65536 /* fds the shim's tables follow (numbers at or past it pass through) */
#define VT_HIST_SUB_BITS 7
#define VT_HIST_SUB_COUNT (1 << VT_HIST_SUB_BITS)
#define VT_HIST_HALF (VT_HIST_SUB_COUNT / 2)
#define VT_HIST_MAX_BITS 40
#define VT_HIST_BUCKETS (VT_HIST_SUB_COUNT + (VT_HIST_MAX_BITS - VT_HIST_SUB_BITS) * VT_HIST_HALF)

/* What a thread was doing: the syscall classes valkeytrace times, and the causes it gives a
 * main-thread off-CPU interval. Numbers are stored in recordings: append, never renumber. */
#define VT_CALL_FDATASYNC 0
#define VT_CALL_FSYNC 1
#define VT_CALL_AOF_WRITE 2    /* write/pwrite64/writev to a regular file (the AOF) */
#define VT_CALL_SOCKET_WRITE 3 /* write/writev to anything else (client sockets, pipes) */
#define VT_CALL_EPOLL_WAIT 4
#define VT_CALL_LOOP_ITERATION 5 /* main thread: one event-loop iteration (shim: from one epoll_wait return to the next) */
#define VT_CALL_AOF_FLUSH 6      /* flushAppendOnlyFile */
#define VT_CALL_OTHER 7
#define VT_CALL_KINDS 8

/* Off-CPU state classes, from sched_switch's prev_state. */
#define VT_STATE_RUNNABLE 0 /* preempted: waiting for a CPU */
#define VT_STATE_SLEEPING 1 /* TASK_INTERRUPTIBLE */
#define VT_STATE_IO 2       /* TASK_UNINTERRUPTIBLE: blocked in I/O */
#define VT_STATE_KINDS 3
/* vt_block_event.state of an event that is a whole call (fdatasync/fsync or an AOF write, on any
 * thread), not an off-CPU interval */
#define VT_EVENT_CALL 3
/* ... of a client request's moments on one connection (duration_ns: the kernel's socket, an id
 * only): data arrived on the server's socket, the server read it, the server wrote to it */
#define VT_EVENT_ARRIVE 4
#define VT_EVENT_RECV 5
#define VT_EVENT_SEND 6

#if defined(__BPF__) || defined(VT_BPF) /* VT_BPF: set by valkeytrace when bcc compiles a probe */
typedef __u64 vt_u64;
typedef __u32 vt_u32;
typedef __u16 vt_u16;
#else
#include <stdint.h>
typedef uint64_t vt_u64;
typedef uint32_t vt_u32;
typedef uint16_t vt_u16;
#endif

/* A latency histogram with its moments. count == sum of buckets. */
struct vt_hist {
    vt_u64 count;
    vt_u64 sum_ns;
    vt_u64 min_ns;
    vt_u64 max_ns;
    vt_u64 buckets[VT_HIST_BUCKETS];
};

/* One main-thread off-CPU interval longer than the threshold (state = VT_STATE_*) or one moment of
 * a client request (VT_EVENT_ARRIVE/RECV/SEND), sent through the ring buffer; or one fdatasync/fsync
 * or AOF write on any thread (state = VT_EVENT_CALL), written into its CPU's call log. */
struct vt_block_event {
    vt_u64 start_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
    vt_u64 duration_ns;
    vt_u32 tid;
    vt_u16 cause; /* VT_CALL_* the thread was inside, VT_CALL_OTHER when none */
    vt_u16 state; /* VT_STATE_* it was switched out in */
    vt_u32 bytes; /* VT_EVENT_RECV/SEND: the bytes read or written (the replication link's offsets) */
    vt_u32 pad;
};

/* A CPU's call log (probes/vt_calllog.bpf.h; csrc/events.c reads it): this header, then
 * VT_CALL_LOG_SIZE(bits) records, back to back per CPU in an array map of vt_block_event elements
 * the tracer mmaps. Only the
 * CPU's own programs write head (they never run two at once on a CPU); only the tracer writes tail.
 * A record is written at head & (size - 1) while head - tail < size, else the call is counted in
 * the kernel's histogram instead: no record is overwritten before the tracer took it. */
struct vt_call_log_head {
    vt_u64 head;    /* records written */
    vt_u64 pad0[7]; /* head and tail on their own cache lines */
    vt_u64 tail;    /* records taken */
    vt_u64 pad1[7];
};
#define VT_CALL_LOG_SIZE(bits) (1ull << (bits))

/* The LD_PRELOAD shim's shared-memory region (a file in /dev/shm made by valkeytrace, mode 0600,
 * named by $VALKEYTRACE_SHM): a header, then VT_SHIM_MAX_THREADS thread slots. A thread claims a
 * slot once (atomic increment of nthreads) and is its only writer; valkeytrace only reads. Each
 * slot has one histogram per VT_CALL_* kind (fdatasync, fsync, aof_write, socket_write,
 * epoll_wait, loop_iteration; the others stay empty). */
#define VT_SHIM_MAGIC 0x31485456u /* "VTH1" little-endian */
#define VT_SHIM_VERSION 3
#define VT_SHIM_MAX_THREADS 64

struct vt_shim_thread {
    vt_u32 tid;
    vt_u32 claimed; /* 1 once the slot's tid is written */
    char name[16];  /* the thread's name when it claimed the slot */
    vt_u64 bytes[VT_CALL_KINDS];
    vt_u64 injected_ns; /* emulated fsync delay added on this thread */
    struct vt_hist hist[VT_CALL_KINDS];
};

struct vt_shim_header {
    vt_u32 magic;
    vt_u32 version;
    vt_u32 max_threads;
    vt_u32 nthreads;         /* slots claimed (may exceed max_threads: the overflow is dropped) */
    vt_u32 pid;              /* the process that mapped it (the server) */
    vt_u32 hist_buckets;     /* VT_HIST_BUCKETS of the writer: layouts must agree */
    vt_u32 paused;           /* set by valkeytrace: 1 = pass calls through untimed (overhead baseline) */
    vt_u32 untimed;          /* set by valkeytrace: bit (1 << VT_CALL_*) = pass that kind through untimed */
    vt_u64 thread_size;      /* sizeof(struct vt_shim_thread) of the writer */
    vt_u64 dropped_calls;    /* calls not recorded because no slot was free */
    vt_u64 inject_delay_ns;  /* the emulation's median delay (0: none), for the record */
    vt_u64 extra_delay_ns;   /* set by valkeytrace while the server runs: added to every fsync/fdatasync
                                on top of the emulation (record --fsync-sensitivity) */
};

/* floor(log2(v)) for v > 0, with shifts only: BPF has no count-leading-zeros instruction. */
static inline vt_u32 vt_log2_u64(vt_u64 v)
{
    vt_u32 r, s;
    r = (v > 0xFFFFFFFFULL) << 5;
    v >>= r;
    s = (v > 0xFFFF) << 4;
    v >>= s;
    r |= s;
    s = (v > 0xFF) << 3;
    v >>= s;
    r |= s;
    s = (v > 0xF) << 2;
    v >>= s;
    r |= s;
    s = (v > 0x3) << 1;
    v >>= s;
    r |= s;
    r |= (vt_u32)(v >> 1);
    return r;
}

static inline vt_u32 vt_hist_bucket_index(vt_u64 value_ns)
{
    vt_u32 msb;
    if (value_ns < VT_HIST_SUB_COUNT)
        return (vt_u32)value_ns;
    msb = vt_log2_u64(value_ns);
    if (msb >= VT_HIST_MAX_BITS)
        return VT_HIST_BUCKETS - 1;
    /* shift so that the value keeps VT_HIST_SUB_BITS significant bits: [64, 128) */
    return VT_HIST_SUB_COUNT + (msb - VT_HIST_SUB_BITS) * VT_HIST_HALF +
           (vt_u32)((value_ns >> (msb - VT_HIST_SUB_BITS + 1)) - VT_HIST_HALF);
}

#endif
