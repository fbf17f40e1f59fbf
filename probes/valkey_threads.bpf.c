/*
 * valkey_threads.bpf.c: where each thread of one valkey-server spends its time.
 *
 * Measures, per thread of process TARGET_TGID:
 *   - every fdatasync / fsync call and AOF write(2) (its start, length and bytes), as a record in its
 *     CPU's call log (vt_calllog.bpf.h): the tracer builds the histograms from them; only a call a full
 *     log could not take goes into the thread's histogram here (log-linear, valkeytrace.h);
 * and, aggregated in the kernel:
 *   - off-CPU time from sched_switch and sched_wakeup, by state (runnable = waiting for a CPU:
 *     preempted, or woken and not yet running; sleeping; uninterruptible = I/O, each until the
 *     wake-up) and by the call the thread was inside (fdatasync/fsync, AOF write, epoll_wait = idle, other);
 *   - main-thread event-loop iterations: beforeSleep -> beforeSleep (uprobe), or, without the
 *     symbol (LOOP_FROM_EPOLL=1), epoll_wait return -> return;
 *   - flushAppendOnlyFile calls and durations (uprobe + uretprobe, when attached);
 *   - every main-thread off-CPU interval >= BLOCK_THRESHOLD_NS, as a record in the same ring buffer,
 *     submitted without waking the reader (userspace polls on a timer); failed submissions are
 *     counted in `lost`, never dropped silently.
 *
 * Sources for the calls:
 *   - TRACE_FS_SYNC=1 (default when the AOF lives on ext4): fdatasync/fsync from the raw
 *     ext4_sync_file_enter/exit tracepoints, on every thread; AOF writes from ext4's first step
 *     for them to the write_end of their last byte, when the saved syscall number and fd say a
 *     write(2) on an AOF fd is under way (TASK_STACK_OFFSET), or, once they did, when a write_begin
 *     is on the same inode (vt_fswrite.bpf.h); no uprobe then;
 *   - call sites (AOF writes without the syscall number, and fsyncs off ext4): uprobes on the server's own
 *     code, a pair per site: the `call fdatasync/fsync/write` instruction (on_site_*) and the
 *     first direct branch after it returns (on_site_exit); both instructions are emulated by the
 *     kernel, not single-stepped (tracers/sites.py finds them). Nothing runs for any other
 *     process or syscall.
 *   - TRACE_REQUESTS=1: while userspace sets requests_on (write-only windows), each client
 *     request's moments: its data arriving on a socket of the server (raw sk_data_ready, any
 *     context: the sockets the server used are kept in server_socks), the server's read of it and
 *     its write back (raw sock_recv_length/sock_send_length, threads of the target only). No
 *     syscall tracepoint: these fire for socket I/O only.
 *   - TRACE_SYSCALLS=1: raw_syscalls sys_enter/sys_exit, for binaries without usable call sites,
 *     and for per-thread socket-write and epoll_wait figures. Enabling any syscall tracepoint
 *     puts every syscall on the machine on the kernel's slow path (docs/performance.md).
 * The epoll_wait (idle) cause of an off-CPU interval comes from the syscall number in the
 * thread's saved user registers (SYSNR_OFFSET bytes past task_struct.stack, the layout taken
 * from this kernel's BTF and checked against a thread of the tracer itself) when the syscall
 * source is off.
 *
 * Cost: filter on the tgid first; no hash map on the hot path. A thread's slot is its tid minus
 * the tgid (valkey starts its threads right after the process), or, for the rare thread outside
 * that range, an entry userspace puts in extra_slots. Per-thread data live in arrays indexed by
 * slot: the histograms in struct vt_shim_thread, the layout the LD_PRELOAD shim uses too.
 *
 * Only tracepoint/uprobe arguments, BPF helpers and BTF-derived offsets are read: no kprobes, no
 * kernel struct from the headers (they may belong to another kernel version). The traced server's
 * pid is not compiled in: userspace writes it into `target` at each launch, so one compiled program
 * serves every launch of a valkeytrace process (tracers/ebpf.py's pool). Parameters come as
 * -D cflags: BLOCK_THRESHOLD_NS, LOOP_FROM_EPOLL, RINGBUF_PAGES, CALL_LOG_BITS, CALL_LOG_CPUS,
 * TRACE_REQUESTS, TRACE_SYSCALLS, TRACE_FS_SYNC, FS_CTIME_START, FS_JOURNAL_START, TRACE_SCHED,
 * TASK_PID_OFFSET, TASK_TGID_OFFSET, TASK_RUNTIME_OFFSET, TASK_STACK_OFFSET, TASK_PT_REGS
 * (none is a pid: a compiled program is kept across processes too, tracers/bpf_cache.py).
 */
#include <uapi/linux/ptrace.h>
#include "valkeytrace.h"

#define MAX_SLOTS VT_SHIM_MAX_THREADS /* direct slots: tid - tgid below this */
#define EXTRA_SLOTS 16                 /* slots past them for the threads outside that range */
#define ALL_SLOTS (MAX_SLOTS + EXTRA_SLOTS)
#define MAX_FDS 4096

struct inflight_call {
    u64 start_ns;
    u64 bytes;     /* requested, for an AOF write timed at its call site */
    u64 remaining; /* bytes the filesystem has still to copy (TRACE_FS_SYNC: the write's end) */
    u64 pos0;      /* the file position it began at, while its length is unread (vt_fswrite.bpf.h) */
    u32 kind;
    u32 depth; /* 1 inside a probed shim wrapper: the wrapper is the call, nested syscalls are not */
};

struct offcpu_since_val {
    u64 start_ns; /* 0: on CPU */
    u32 tid;      /* whose interval it is: the slot's thread */
    u16 cause;
    u16 state;
};

struct offcpu_slot {
    u64 tid; /* the slot's owner: its totals restart from zero when another thread takes it */
    u64 ns[VT_CALL_KINDS][VT_STATE_KINDS];
    u64 charged_ns; /* wait for a CPU the kernel charged as on-CPU time, moved there (align_run) */
};

/* Where the kernel's charge of a run of the thread began, against the switch that began it: the
 * runnable part that ended at the switch-in, and the kernel's runtime total at the last switch-out. */
struct run_state {
    u64 last_runtime; /* task_struct.se.sum_exec_runtime at the thread's last switch-out */
    u64 in_ns;        /* its last switch-in */
    u64 rq_ns;        /* the runnable part that ended there */
    u64 blk_ns;       /* the blocked part before it (ended by the wake-up) */
    u32 rq_cause;
    u32 tid;
    u16 blk_cause;
    u16 blk_state;
};

BPF_ARRAY(threads, struct vt_shim_thread, ALL_SLOTS);
BPF_ARRAY(zero_thread, struct vt_shim_thread, 1); /* all zero: copied over a slot that changes hands */
BPF_ARRAY(inflight, struct inflight_call, ALL_SLOTS);
BPF_ARRAY(offcpu_since, struct offcpu_since_val, ALL_SLOTS);
BPF_ARRAY(offcpu, struct offcpu_slot, ALL_SLOTS);
BPF_ARRAY(func_start, u64, ALL_SLOTS);
BPF_ARRAY(run_states, struct run_state, ALL_SLOTS);
BPF_ARRAY(aof_fds, u8, MAX_FDS);
/* tid -> slot in [MAX_SLOTS, ALL_SLOTS): never a direct slot, so no two threads share one */
BPF_HASH(extra_slots, u32, u32, EXTRA_SLOTS);
BPF_ARRAY(extra_count, u32, 1);
BPF_ARRAY(loop_last, u64, 1);
BPF_ARRAY(lost, u64, 1);
BPF_RINGBUF_OUTPUT(block_events, RINGBUF_PAGES);
BPF_ARRAY(target, u32, 1); /* the traced server's pid: its tgid and its main thread's tid; 0: none */

/* The target's tgid, or one no task has (pid_max is at most 2^22) while there is none. */
static __always_inline u32 target_tgid(void)
{
    int zero = 0;
    u32 *t = target.lookup(&zero);
    return t && *t ? *t : 0xffffffffu;
}
#define TARGET_TGID target_tgid()
#define MAIN_TID TARGET_TGID

/* The current task's slot, or -1 when it is not a thread of the target. */
static __always_inline int current_slot(u32 *tid_out)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tid, off, *extra;
    if ((id >> 32) != TARGET_TGID)
        return -1;
    tid = (u32)id;
    *tid_out = tid;
    off = tid - TARGET_TGID;
    if (off < MAX_SLOTS)
        return (int)off;
    extra = extra_slots.lookup(&tid);
    return extra ? (int)*extra : -1;
}

/* The slot of thread tid of the target (the task is not necessarily the current one), or -1. A
 * tid in the direct range may belong to another process: callers check the slot's owner. */
static __always_inline int slot_of(u32 tid)
{
    u32 off = tid - TARGET_TGID;
    if (off < MAX_SLOTS)
        return (int)off;
    int zero = 0;
    u32 *n = extra_count.lookup(&zero);
    if (n && *n) {
        u32 *s = extra_slots.lookup(&tid);
        if (s)
            return (int)*s;
    }
    return -1;
}

/* A record refused (its ring buffer or call log full): counted in `lost`, never dropped silently. 0. */
static __always_inline int count_lost(void)
{
    int zero = 0;
    u64 *l = lost.lookup(&zero);
    if (l)
        __sync_fetch_and_add(l, 1);
    return 0;
}

static __always_inline void fill_event(struct vt_block_event *ev, u32 tid, u64 start_ns, u64 dur, u32 cause,
                                       u32 state, u32 bytes)
{
    ev->start_ns = start_ns;
    ev->duration_ns = dur;
    ev->tid = tid;
    ev->cause = cause;
    ev->state = state;
    ev->bytes = bytes;
    ev->pad = 0;
}

/* 1 when the record went into the ring buffer; 0 when it was full (counted in `lost`) */
static __always_inline int emit_bytes(u32 tid, u64 start_ns, u64 dur, u32 cause, u32 state, u32 bytes)
{
    /* written in place (reserve, then submit): no copy through the stack */
    struct vt_block_event *ev = block_events.ringbuf_reserve(sizeof(struct vt_block_event));
    if (!ev)
        return count_lost();
    fill_event(ev, tid, start_ns, dur, cause, state, bytes);
    block_events.ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
    return 1;
}

static __always_inline void emit(u32 tid, u64 start_ns, u64 dur, u32 cause, u32 state)
{
    emit_bytes(tid, start_ns, dur, cause, state, 0);
}

static __always_inline void account(int slot, u32 tid, u32 kind, u64 dur, u64 bytes)
{
    struct vt_shim_thread *t = threads.lookup(&slot);
    u64 b;
    if (!t || kind >= VT_CALL_KINDS)
        return;
    if (t->tid != tid) { /* first call of this thread, or the slot changed hands: start from zero */
        int zero = 0;
        struct vt_shim_thread *z = zero_thread.lookup(&zero);
        if (t->claimed && z)
            threads.update(&slot, z);
        t->tid = tid;
        t->claimed = 1;
    }
    b = vt_hist_bucket_index(dur);
    asm volatile("" : "+r"(b)); /* keep the bounds check below visible to the verifier */
    if (b >= VT_HIST_BUCKETS)
        return;
    /* plain adds, no locked instructions: a slot has one writer, its own thread (every caller
     * accounts the current thread's call), and one thread's programs never run at once */
    struct vt_hist *h = &t->hist[kind];
    h->buckets[b] += 1;
    h->sum_ns += dur;
    h->count += 1;
    if (dur > h->max_ns)
        h->max_ns = dur;
    if (bytes)
        t->bytes[kind] += bytes;
}

#include "vt_calllog.bpf.h" /* the calls' records */

/* The current thread's in-flight call (its slot and tid too), or NULL when the current task is
 * not a thread of the target */
static __always_inline struct inflight_call *current_inflight(int *slot, u32 *tid)
{
    *slot = current_slot(tid);
    return *slot < 0 ? NULL : inflight.lookup(slot);
}

/* wrapper = 1: the shim's fdatasync/fsync wrapper (real call + injected delay) begins; it is the
 * call, and the syscall inside it is not timed again */
static __always_inline int begin_call(u32 kind, u64 bytes, u32 wrapper)
{
    u32 tid = 0;
    int slot;
    struct inflight_call *in = current_inflight(&slot, &tid);
    if (!in || (in->depth && !wrapper))
        return 0; /* inside a probed shim wrapper: the wrapper is the call */
    in->start_ns = bpf_ktime_get_ns();
    in->kind = kind;
    in->bytes = bytes;
    in->remaining = bytes;
    in->depth = wrapper;
    return 0;
}

static __always_inline int call_enter(u32 kind, u64 bytes) { return begin_call(kind, bytes, 0); }

/* 1 when fd is one of the server's AOF files (userspace keeps aof_fds from /proc/PID/fd) */
static __always_inline int is_aof_fd(u64 fd)
{
    u32 key = (u32)fd;
    u8 *is_aof = fd < MAX_FDS ? aof_fds.lookup(&key) : 0;
    return is_aof && *is_aof;
}

static __always_inline int write_enter(int fd)
{
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_TGID)
        return 0;
    return call_enter(is_aof_fd((u32)fd) ? VT_CALL_AOF_WRITE : VT_CALL_SOCKET_WRITE, 0);
}

/* ret: the syscall's return value (bytes written) when known, else < 0 and the requested bytes
 * recorded at the call site count; wrapper: the end of a shim wrapper (begin_call) */
static __always_inline int end_call_of(struct inflight_call *in, int slot, u32 tid, long ret, u32 wrapper,
                                       int in_tracepoint)
{
    u64 start, dur, now, bytes;
    u32 kind;
    if (!in || in->depth != wrapper || !in->start_ns)
        return 0;
    start = in->start_ns;
    kind = in->kind;
    bytes = ret > 0 ? (u64)ret : in->bytes;
    in->start_ns = 0;
    in->depth = 0;
    now = bpf_ktime_get_ns();
    dur = now - start;
    if (kind != VT_CALL_AOF_WRITE && kind != VT_CALL_SOCKET_WRITE)
        bytes = 0;
    /* an fsync or AOF write is its record (bytes included): the tracer builds the window's histograms
     * from the records, and the kernel's histogram counts only the calls whose record was refused. Both
     * for one call cost ~15-20 ns of BPF per request more (docs/performance.md). Ended in one of ext4's
     * tracepoints (preemption off: a CPU's log has one writer at a time), the record goes into the CPU's
     * call log; in a uprobe or a syscall tracepoint (both can be preempted), into the ring buffer. */
    if (kind != VT_CALL_FDATASYNC && kind != VT_CALL_FSYNC && kind != VT_CALL_AOF_WRITE
        || !(in_tracepoint ? log_call(tid, start, dur, kind, (u32)bytes)
                           : emit_bytes(tid, start, dur, kind, VT_EVENT_CALL, (u32)bytes)))
        account(slot, tid, kind, dur, bytes);
#if LOOP_FROM_EPOLL
    if (kind == VT_CALL_EPOLL_WAIT && tid == MAIN_TID) {
        int zero = 0;
        u64 *last = loop_last.lookup(&zero);
        if (last) {
            if (*last)
                account(slot, tid, VT_CALL_LOOP_ITERATION, now - *last, 0);
            *last = now;
        }
    }
#endif
    return 0;
}

static __always_inline int end_call(long ret, u32 wrapper, int in_tracepoint)
{
    u32 tid = 0;
    int slot;
    struct inflight_call *in = current_inflight(&slot, &tid);
    return end_call_of(in, slot, tid, ret, wrapper, in_tracepoint);
}

static __always_inline int call_exit(long ret, int in_tracepoint) { return end_call(ret, 0, in_tracepoint); }

/* Call sites (tracers/sites.py): the call instruction, and the first direct branch after the
 * call returns. The call's arguments are in their registers at the call instruction. */
int on_site_fdatasync(struct pt_regs *ctx) { return call_enter(VT_CALL_FDATASYNC, 0); }
int on_site_fsync(struct pt_regs *ctx) { return call_enter(VT_CALL_FSYNC, 0); }
int on_site_aof_write(struct pt_regs *ctx) { return call_enter(VT_CALL_AOF_WRITE, PT_REGS_PARM3(ctx)); }
int on_site_exit(struct pt_regs *ctx) { return call_exit(-1, 0); }

#if TRACE_SYSCALLS
/* One raw tracepoint pair for every syscall instead of one tracepoint per syscall: no trace
 * record is built, so a call that is not ours costs a few instructions (plus the slow path every
 * syscall takes while any syscall tracepoint is enabled). */
#include <asm/unistd.h>
RAW_TRACEPOINT_PROBE(sys_enter)
{
    struct pt_regs *regs;
    long id;
    unsigned long fd = 0;
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_TGID)
        return 0;
    id = (long)ctx->args[1];
    switch (id) {
    case __NR_fdatasync:
        return call_enter(VT_CALL_FDATASYNC, 0);
    case __NR_fsync:
        return call_enter(VT_CALL_FSYNC, 0);
    case __NR_write:
    case __NR_pwrite64:
    case __NR_writev:
        regs = (struct pt_regs *)ctx->args[0];
        bpf_probe_read_kernel(&fd, sizeof(fd), &PT_REGS_PARM1(regs));
        return write_enter((int)fd);
    case __NR_epoll_wait:
        return call_enter(VT_CALL_EPOLL_WAIT, 0);
    }
    return 0;
}

RAW_TRACEPOINT_PROBE(sys_exit)
{
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_TGID)
        return 0;
    return call_exit((long)ctx->args[1], 0); /* only a call our sys_enter started is completed */
}
#endif /* TRACE_SYSCALLS */
/* epoll_pwait is not traced: glibc's epoll_wait uses the epoll_wait syscall where the arch has
 * it (x86_64), and its tracepoint struct needs sigset_t, which bcc cannot resolve here. */

#include "vt_sched.bpf.h" /* TRACE_SCHED: off-CPU intervals, the wait for a CPU */
#include "vt_fswrite.bpf.h" /* TRACE_FS_SYNC: fsyncs and AOF writes from ext4's tracepoints */

/* uprobe on beforeSleep: one event-loop iteration ends where the next begins */
int on_before_sleep(struct pt_regs *ctx)
{
    u32 tid = 0;
    int slot = current_slot(&tid);
    int zero = 0;
    u64 now, *last;
    if (slot < 0 || tid != MAIN_TID)
        return 0;
    now = bpf_ktime_get_ns();
    last = loop_last.lookup(&zero);
    if (last) {
        if (*last)
            account(slot, tid, VT_CALL_LOOP_ITERATION, now - *last, 0);
        *last = now;
    }
    return 0;
}

int on_flush_enter(struct pt_regs *ctx)
{
    u32 tid = 0;
    int slot = current_slot(&tid);
    u64 *start;
    if (slot < 0)
        return 0;
    start = func_start.lookup(&slot);
    if (start)
        *start = bpf_ktime_get_ns();
    return 0;
}

int on_flush_return(struct pt_regs *ctx)
{
    u32 tid = 0;
    int slot = current_slot(&tid);
    u64 *start;
    if (slot < 0)
        return 0;
    start = func_start.lookup(&slot);
    if (!start || !*start)
        return 0;
    account(slot, tid, VT_CALL_AOF_FLUSH, bpf_ktime_get_ns() - *start, 0);
    *start = 0;
    return 0;
}

#if TRACE_REQUESTS
BPF_ARRAY(requests_on, u32, 1);
BPF_HASH(server_socks, u64, u8, 16384);

static __always_inline int requests_wanted(void)
{
    int zero = 0;
    u32 *on = requests_on.lookup(&zero);
    return on && *on;
}

/* the server read (RECV) or wrote (SEND) ret bytes on socket sk: TP_PROTO(struct sock *sk, int ret, int flags) */
static __always_inline int sock_io(u64 sk, long ret, u32 state)
{
    u64 id = bpf_get_current_pid_tgid();
    u8 one = 1;
    if ((id >> 32) != TARGET_TGID || ret <= 0 || !requests_wanted())
        return 0;
    server_socks.update(&sk, &one);
    emit_bytes((u32)id, bpf_ktime_get_ns(), sk, VT_CALL_OTHER, state, (u32)ret);
    return 0;
}

/* attached by userspace for a write-only window only, detached after it: these raw tracepoints
 * fire for every socket read and write on the machine (~400K/s under a GET load here), so they
 * cost nothing in the other windows (docs/performance.md) */
int on_sock_recv(struct bpf_raw_tracepoint_args *ctx) { return sock_io(ctx->args[0], (long)(int)ctx->args[1], VT_EVENT_RECV); }
int on_sock_send(struct bpf_raw_tracepoint_args *ctx) { return sock_io(ctx->args[0], (long)(int)ctx->args[1], VT_EVENT_SEND); }

/* data arrived on a socket (the sender's context on loopback): ours when the server used it.
 * TP_PROTO(const struct sock *sk) */
int on_sk_data_ready(struct bpf_raw_tracepoint_args *ctx)
{
    u64 sk = ctx->args[0];
    if (!requests_wanted() || !server_socks.lookup(&sk))
        return 0;
    emit(0, bpf_ktime_get_ns(), sk, VT_CALL_OTHER, VT_EVENT_ARRIVE);
    return 0;
}
#endif

/* The shim's fdatasync/fsync wrappers (real call + injected delay): the wrapper is the call. */
int on_shim_fdatasync_enter(struct pt_regs *ctx) { return begin_call(VT_CALL_FDATASYNC, 0, 1); }
int on_shim_fsync_enter(struct pt_regs *ctx) { return begin_call(VT_CALL_FSYNC, 0, 1); }
int on_shim_sync_return(struct pt_regs *ctx) { return end_call(-1, 1, 0); }
