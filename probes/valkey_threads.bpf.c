/*
 * valkey_threads.bpf.c: where each thread of one valkey-server spends its time.
 *
 * Measures, per thread of process TARGET_TGID, aggregated in the kernel:
 *   - fdatasync / fsync latency (log-linear histograms, valkeytrace.h), count, total, max;
 *   - write / pwrite64 / writev latency and bytes, split by fd into AOF writes (fds userspace
 *     lists in aof_fds: the server's open files under its appendonly directory) and all other
 *     writes (client sockets, pipes);
 *   - off-CPU time from sched:sched_switch, keyed by the state the thread was switched out in
 *     (runnable = preempted, waiting for a CPU; sleeping; uninterruptible = I/O) and by the call
 *     it was inside (fdatasync/fsync, AOF write, epoll_wait = idle, other);
 *   - main-thread event-loop iterations: beforeSleep -> beforeSleep (uprobe), or, without the
 *     symbol (LOOP_FROM_EPOLL=1), epoll_wait return -> return;
 *   - flushAppendOnlyFile calls and durations (uprobe + uretprobe, HAVE_FLUSH_PROBE=1);
 *   - every main-thread off-CPU interval >= BLOCK_THRESHOLD_NS, and every fdatasync/fsync call
 *     on any thread, as an event in a ring buffer, submitted without waking the reader
 *     (userspace polls on a timer); failed submissions are counted in `lost`, never dropped
 *     silently.
 *
 * Only tracepoint arguments and BPF helpers are read: no kprobes, no kernel structs (the kernel
 * headers may belong to another kernel version). Parameters come as -D cflags:
 *   TARGET_TGID, MAIN_TID, BLOCK_THRESHOLD_NS, LOOP_FROM_EPOLL, HAVE_FLUSH_PROBE, RINGBUF_PAGES,
 *   SHIM_FSYNC_PROBES (the LD_PRELOAD shim's fsync wrappers are probed: its injected delay counts
 *   as fsync time, and the syscalls inside the wrapper are not counted twice).
 */
#include <uapi/linux/ptrace.h>
#include "valkeytrace.h"

struct call_key {
    u32 tid;
    u16 kind;
    u16 bucket;
};

struct stat_key {
    u32 tid;
    u32 kind;
};

struct stat_val {
    u64 count;
    u64 sum_ns;
    u64 max_ns;
    u64 bytes;
};

struct inflight_call {
    u64 start_ns;
    u32 kind;
    u32 depth; /* >0 while inside a probed shim wrapper: nested syscalls are not counted */
};

struct offcpu_key {
    u32 tid;
    u16 cause;
    u16 state;
};

struct offcpu_since_val {
    u64 start_ns;
    u16 cause;
    u16 state;
    u32 pad;
};

BPF_HASH(aof_fds, u32, u8, 4096);
BPF_HASH(inflight, u32, struct inflight_call, 4096);
BPF_HASH(hist, struct call_key, u64, 65536);
BPF_HASH(stats, struct stat_key, struct stat_val, 4096);
BPF_HASH(offcpu_since, u32, struct offcpu_since_val, 4096);
BPF_HASH(offcpu, struct offcpu_key, u64, 4096);
BPF_HASH(func_start, u32, u64, 4096);
BPF_ARRAY(loop_last, u64, 1);
BPF_ARRAY(lost, u64, 1);
BPF_RINGBUF_OUTPUT(block_events, RINGBUF_PAGES);

static __always_inline u32 target_tid(void)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != TARGET_TGID)
        return 0;
    return (u32)id;
}

static __always_inline void account(u32 tid, u32 kind, u64 dur, u64 bytes)
{
    struct call_key hk = {};
    u64 zero = 0, *c;
    struct stat_key sk = {};
    struct stat_val zs = {}, *s;

    hk.tid = tid;
    hk.kind = kind;
    hk.bucket = vt_hist_bucket_index(dur);
    c = hist.lookup_or_try_init(&hk, &zero);
    if (c)
        __sync_fetch_and_add(c, 1);
    sk.tid = tid;
    sk.kind = kind;
    s = stats.lookup_or_try_init(&sk, &zs);
    if (s) {
        __sync_fetch_and_add(&s->count, 1);
        __sync_fetch_and_add(&s->sum_ns, dur);
        if (bytes)
            __sync_fetch_and_add(&s->bytes, bytes);
        if (dur > s->max_ns)
            s->max_ns = dur; /* racy max: each thread updates only its own key */
    }
}

static __always_inline void emit(u32 tid, u64 start_ns, u64 dur, u32 cause, u32 state)
{
    struct vt_block_event ev = {};
    ev.start_ns = start_ns;
    ev.duration_ns = dur;
    ev.tid = tid;
    ev.cause = cause;
    ev.state = state;
    if (block_events.ringbuf_output(&ev, sizeof(ev), BPF_RB_NO_WAKEUP) != 0) {
        int zero = 0;
        u64 *l = lost.lookup(&zero);
        if (l)
            __sync_fetch_and_add(l, 1);
    }
}

static __always_inline int call_enter(u32 kind)
{
    u32 tid = target_tid();
    if (!tid)
        return 0;
    struct inflight_call *cur = inflight.lookup(&tid);
    if (cur && cur->depth)
        return 0; /* inside a probed shim wrapper: the wrapper is the call */
    struct inflight_call in = {};
    in.start_ns = bpf_ktime_get_ns();
    in.kind = kind;
    inflight.update(&tid, &in);
    return 0;
}

static __always_inline int write_enter(int fd)
{
    u32 ufd = fd;
    u8 *is_aof;
    if (!target_tid())
        return 0;
    is_aof = aof_fds.lookup(&ufd);
    return call_enter(is_aof ? VT_CALL_AOF_WRITE : VT_CALL_SOCKET_WRITE);
}

static __always_inline int call_exit(long ret, int count_bytes)
{
    u32 tid = target_tid();
    if (!tid)
        return 0;
    struct inflight_call *in = inflight.lookup(&tid);
    if (!in || in->depth)
        return 0;
    u64 start = in->start_ns;
    u64 dur = bpf_ktime_get_ns() - start;
    u32 kind = in->kind;
    inflight.delete(&tid);
    account(tid, kind, dur, (count_bytes && ret > 0) ? (u64)ret : 0);
    if (kind == VT_CALL_FDATASYNC || kind == VT_CALL_FSYNC)
        emit(tid, start, dur, kind, VT_EVENT_CALL);
#if LOOP_FROM_EPOLL
    if (kind == VT_CALL_EPOLL_WAIT && tid == MAIN_TID) {
        int zero = 0;
        u64 now = bpf_ktime_get_ns();
        u64 *last = loop_last.lookup(&zero);
        if (last) {
            if (*last)
                account(tid, VT_CALL_LOOP_ITERATION, now - *last, 0);
            *last = now;
        }
    }
#endif
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_fdatasync) { return call_enter(VT_CALL_FDATASYNC); }
TRACEPOINT_PROBE(syscalls, sys_exit_fdatasync) { return call_exit(args->ret, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_fsync) { return call_enter(VT_CALL_FSYNC); }
TRACEPOINT_PROBE(syscalls, sys_exit_fsync) { return call_exit(args->ret, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_write) { return write_enter(args->fd); }
TRACEPOINT_PROBE(syscalls, sys_exit_write) { return call_exit(args->ret, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_pwrite64) { return write_enter(args->fd); }
TRACEPOINT_PROBE(syscalls, sys_exit_pwrite64) { return call_exit(args->ret, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_writev) { return write_enter(args->fd); }
TRACEPOINT_PROBE(syscalls, sys_exit_writev) { return call_exit(args->ret, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_epoll_wait) { return call_enter(VT_CALL_EPOLL_WAIT); }
TRACEPOINT_PROBE(syscalls, sys_exit_epoll_wait) { return call_exit(args->ret, 0); }
/* epoll_pwait is not traced: glibc's epoll_wait uses the epoll_wait syscall where the arch has
 * it (x86_64), and its tracepoint struct needs sigset_t, which bcc cannot resolve here. */

TRACEPOINT_PROBE(sched, sched_switch)
{
    u64 now = bpf_ktime_get_ns();
    u32 prev = target_tid(); /* at this tracepoint the current task is still prev */
    u32 next = args->next_pid;
    struct offcpu_since_val *since;

    if (prev) {
        struct offcpu_since_val st = {};
        long ps = args->prev_state;
        struct inflight_call *in = inflight.lookup(&prev);
        st.start_ns = now;
        /* TASK_INTERRUPTIBLE = 1, TASK_UNINTERRUPTIBLE = 2; running or preempted otherwise */
        st.state = (ps & 2) ? VT_STATE_IO : (ps & 1) ? VT_STATE_SLEEPING : VT_STATE_RUNNABLE;
        st.cause = in ? in->kind : VT_CALL_OTHER;
        offcpu_since.update(&prev, &st);
    }
    since = offcpu_since.lookup(&next);
    if (since) {
        u64 dur = now - since->start_ns;
        struct offcpu_key k = {};
        u64 zero = 0, *total;
        k.tid = next;
        k.cause = since->cause;
        k.state = since->state;
        total = offcpu.lookup_or_try_init(&k, &zero);
        if (total)
            __sync_fetch_and_add(total, dur);
        if (next == MAIN_TID && dur >= BLOCK_THRESHOLD_NS)
            emit(next, since->start_ns, dur, since->cause, since->state);
        offcpu_since.delete(&next);
    }
    return 0;
}

/* uprobe on beforeSleep: one event-loop iteration ends where the next begins */
int on_before_sleep(struct pt_regs *ctx)
{
    u32 tid = target_tid();
    int zero = 0;
    u64 now, *last;
    if (tid != MAIN_TID)
        return 0;
    now = bpf_ktime_get_ns();
    last = loop_last.lookup(&zero);
    if (last) {
        if (*last)
            account(tid, VT_CALL_LOOP_ITERATION, now - *last, 0);
        *last = now;
    }
    return 0;
}

static __always_inline int func_enter(void)
{
    u32 tid = target_tid();
    u64 now;
    if (!tid)
        return 0;
    now = bpf_ktime_get_ns();
    func_start.update(&tid, &now);
    return 0;
}

static __always_inline int func_exit(u32 kind)
{
    u32 tid = target_tid();
    u64 *start;
    if (!tid)
        return 0;
    start = func_start.lookup(&tid);
    if (!start)
        return 0;
    account(tid, kind, bpf_ktime_get_ns() - *start, 0);
    func_start.delete(&tid);
    return 0;
}

int on_flush_enter(struct pt_regs *ctx) { return func_enter(); }
int on_flush_return(struct pt_regs *ctx) { return func_exit(VT_CALL_AOF_FLUSH); }

/* The shim's fdatasync/fsync wrappers (real call + injected delay): the wrapper is the call. */
static __always_inline int shim_enter(u32 kind)
{
    u32 tid = target_tid();
    if (!tid)
        return 0;
    struct inflight_call in = {};
    in.start_ns = bpf_ktime_get_ns();
    in.kind = kind;
    in.depth = 1;
    inflight.update(&tid, &in);
    return 0;
}

static __always_inline int shim_exit(void)
{
    u32 tid = target_tid();
    if (!tid)
        return 0;
    struct inflight_call *in = inflight.lookup(&tid);
    if (!in || !in->depth)
        return 0;
    u64 start = in->start_ns;
    u64 dur = bpf_ktime_get_ns() - start;
    u32 kind = in->kind;
    inflight.delete(&tid);
    account(tid, kind, dur, 0);
    emit(tid, start, dur, kind, VT_EVENT_CALL);
    return 0;
}

int on_shim_fdatasync_enter(struct pt_regs *ctx) { return shim_enter(VT_CALL_FDATASYNC); }
int on_shim_fsync_enter(struct pt_regs *ctx) { return shim_enter(VT_CALL_FSYNC); }
int on_shim_sync_return(struct pt_regs *ctx) { return shim_exit(); }
