/*
 * valkey_threads.bpf.c: where each thread of one valkey-server spends its time.
 *
 * Measures, per thread of process TARGET_TGID, aggregated in the kernel:
 *   - fdatasync / fsync latency (log-linear histograms, valkeytrace.h), count, total, max;
 *   - AOF write(2) latency and bytes;
 *   - off-CPU time from sched_switch and sched_wakeup, by state (runnable = waiting for a CPU:
 *     preempted, or woken and not yet running; sleeping; uninterruptible = I/O, each until the
 *     wake-up) and by the call the thread was inside (fdatasync/fsync, AOF write, epoll_wait = idle, other);
 *   - main-thread event-loop iterations: beforeSleep -> beforeSleep (uprobe), or, without the
 *     symbol (LOOP_FROM_EPOLL=1), epoll_wait return -> return;
 *   - flushAppendOnlyFile calls and durations (uprobe + uretprobe, when attached);
 *   - every main-thread off-CPU interval >= BLOCK_THRESHOLD_NS, and every fdatasync/fsync call
 *     and AOF write on any thread, as an event in a ring buffer, submitted without waking the reader
 *     (userspace polls on a timer); failed submissions are counted in `lost`, never dropped
 *     silently.
 *
 * Sources for the calls:
 *   - TRACE_FS_SYNC=1 (default when the AOF lives on ext4): fdatasync/fsync from the raw
 *     ext4_sync_file_enter/exit tracepoints, on every thread; AOF writes from ext4's first step
 *     for them to the write_end of their last byte, when the saved syscall number and fd say a
 *     write(2) on an AOF fd is under way (TASK_STACK_OFFSET); no uprobe then;
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
 * kernel struct from the headers (they may belong to another kernel version). Parameters come as
 * -D cflags: TARGET_TGID, MAIN_TID, BLOCK_THRESHOLD_NS, LOOP_FROM_EPOLL, RINGBUF_PAGES,
 * TRACE_REQUESTS, TRACE_SYSCALLS, TRACE_FS_SYNC, FS_JOURNAL_START, TRACE_SCHED, TASK_PID_OFFSET, TASK_TGID_OFFSET, TASK_RUNTIME_OFFSET, TASK_STACK_OFFSET, CHECK_TGID.
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

static __always_inline void emit_bytes(u32 tid, u64 start_ns, u64 dur, u32 cause, u32 state, u32 bytes)
{
    struct vt_block_event ev = {};
    ev.bytes = bytes;
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
    struct vt_hist *h = &t->hist[kind];
    __sync_fetch_and_add(&h->buckets[b], 1);
    __sync_fetch_and_add(&h->sum_ns, dur);
    __sync_fetch_and_add(&h->count, 1);
    if (dur > h->max_ns)
        h->max_ns = dur; /* racy max: a slot has one writer thread */
    if (bytes)
        __sync_fetch_and_add(&t->bytes[kind], bytes);
}

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
static __always_inline int end_call(long ret, u32 wrapper)
{
    u32 tid = 0;
    int slot;
    struct inflight_call *in = current_inflight(&slot, &tid);
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
    account(slot, tid, kind, dur, bytes);
    if (kind == VT_CALL_FDATASYNC || kind == VT_CALL_FSYNC || kind == VT_CALL_AOF_WRITE)
        emit(tid, start, dur, kind, VT_EVENT_CALL);
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

static __always_inline int call_exit(long ret) { return end_call(ret, 0); }

/* Call sites (tracers/sites.py): the call instruction, and the first direct branch after the
 * call returns. The call's arguments are in their registers at the call instruction. */
int on_site_fdatasync(struct pt_regs *ctx) { return call_enter(VT_CALL_FDATASYNC, 0); }
int on_site_fsync(struct pt_regs *ctx) { return call_enter(VT_CALL_FSYNC, 0); }
int on_site_aof_write(struct pt_regs *ctx) { return call_enter(VT_CALL_AOF_WRITE, PT_REGS_PARM3(ctx)); }
int on_site_exit(struct pt_regs *ctx) { return call_exit(-1); }

#if TRACE_FS_SYNC
/* ext4's own tracepoints, raw (no trace record built); they run only when some process syncs or
 * writes an ext4 file, never for other syscalls. Each costs far less than a uprobe hit inside
 * valkey-server, on the main thread's fsync path (docs/performance.md has both).
 *
 * fdatasync/fsync: ext4_sync_file enter/exit, on every thread. The time is the filesystem's sync:
 * the whole call but the syscall entry and fd lookup (well under a microsecond).
 * TP_PROTO(struct file *file, int datasync) / TP_PROTO(struct inode *inode, int ret). */
RAW_TRACEPOINT_PROBE(ext4_sync_file_enter)
{
    return call_enter(ctx->args[1] ? VT_CALL_FDATASYNC : VT_CALL_FSYNC, 0);
}

RAW_TRACEPOINT_PROBE(ext4_sync_file_exit)
{
    return call_exit(-1);
}

/* AOF write(2) ends when ext4 has copied the requested bytes into the page cache: the write_end
 * of its last folio (one per folio; TP_PROTO(struct inode *inode, loff_t pos, unsigned int len,
 * unsigned int copied)). Not in the figure: the syscall's return path after that copy (unlock,
 * fsnotify), under a microsecond. It begins (aof_write_from_syscall below, when the syscall
 * number can be read) at ext4's first step for it: the journal start of the mtime update, or the
 * write_begin of its first folio, or, when the thread blocks before either (the inode lock, the
 * journal), at that context switch: every blocked moment is in it, the few on-CPU microseconds
 * of syscall entry and fd lookup before ext4 is reached are not. Without the syscall number it
 * begins at its call site (one uprobe, on_site_aof_write, the length in its third argument). */
static __always_inline int write_copied(u64 copied)
{
    u32 tid = 0;
    int slot;
    struct inflight_call *in = current_inflight(&slot, &tid);
    if (!in || !in->start_ns || in->kind != VT_CALL_AOF_WRITE || in->depth)
        return 0;
    if (copied < in->remaining) {
        in->remaining -= copied;
        return 0;
    }
    return call_exit(-1);
}

RAW_TRACEPOINT_PROBE(ext4_da_write_end) { return write_copied(ctx->args[3]); }
RAW_TRACEPOINT_PROBE(ext4_write_end) { return write_copied(ctx->args[3]); }
RAW_TRACEPOINT_PROBE(ext4_journalled_write_end) { return write_copied(ctx->args[3]); }
#endif

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
    return call_exit((long)ctx->args[1]); /* only a call our sys_enter started is completed */
}
#endif /* TRACE_SYSCALLS */
/* epoll_pwait is not traced: glibc's epoll_wait uses the epoll_wait syscall where the arch has
 * it (x86_64), and its tracepoint struct needs sigset_t, which bcc cannot resolve here. */

#if TRACE_SCHED
#if TASK_STACK_OFFSET
#include <asm/unistd.h>
/* The byte offset of the saved user orig_ax (the syscall number) past task_struct.stack:
 * THREAD_SIZE - stack padding - sizeof(struct pt_regs) + offsetof(orig_ax). Userspace checks the
 * candidates against a thread of its own sleeping in clock_nanosleep (CHECK_TGID, check_tid),
 * then stores the one that matched in sysnr_offset; 0 until then (no idle cause). */
#define SYSNR_CANDIDATES 4
BPF_ARRAY(sysnr_offset, u64, 1);
BPF_ARRAY(check_tid, u32, 1);
BPF_ARRAY(check_hits, u64, SYSNR_CANDIDATES);

static __always_inline long task_sysnr(void *task, u64 off)
{
    void *stack = 0;
    long nr = -1;
    if (bpf_probe_read_kernel(&stack, sizeof(stack), task + TASK_STACK_OFFSET) != 0 || !stack)
        return -1;
    if (bpf_probe_read_kernel(&nr, sizeof(nr), stack + off) != 0)
        return -1;
    return nr;
}

static __always_inline void sysnr_check(u32 tid)
{
    int zero = 0;
    u32 *want = check_tid.lookup(&zero);
    void *task;
    if (!want || *want != tid)
        return;
    task = (void *)bpf_get_current_task();
    u64 candidates[SYSNR_CANDIDATES] = {16384 - 48, 16384 - 16 - 48, 32768 - 48, 32768 - 16 - 48};
#pragma unroll
    for (int i = 0; i < SYSNR_CANDIDATES; i++) {
        if (task_sysnr(task, candidates[i]) == __NR_clock_nanosleep) {
            int k = i;
            u64 *h = check_hits.lookup(&k);
            if (h)
                __sync_fetch_and_add(h, 1);
        }
    }
}

/* The saved user registers of the current task's syscall, in struct pt_regs order from dx to
 * orig_ax (the syscall number; arguments: di, si, dx). -1 until the offset is known. */
struct user_call {
    u64 dx, si, di;
    long nr;
};

static __always_inline int current_user_call(struct user_call *uc)
{
    int zero = 0;
    u64 *off = sysnr_offset.lookup(&zero);
    void *stack = 0;
    if (!off || !*off)
        return -1;
    if (bpf_probe_read_kernel(&stack, sizeof(stack), (void *)bpf_get_current_task() + TASK_STACK_OFFSET) != 0
        || !stack)
        return -1;
    return bpf_probe_read_kernel(uc, sizeof(*uc), stack + *off - 3 * sizeof(u64));
}

static __always_inline int is_epoll_wait(long nr)
{
    return nr == __NR_epoll_wait || nr == __NR_epoll_pwait || nr == __NR_epoll_pwait2;
}

#if TRACE_FS_SYNC
/* When the current thread is inside write(2)/pwrite64(2) on an AOF fd and has no call in flight,
 * its AOF write begins now (the requested length from dx). 1 when it did. */
static __always_inline int aof_write_from_syscall(struct inflight_call *in, struct user_call *uc)
{
    if (in->start_ns || (uc->nr != __NR_write && uc->nr != __NR_pwrite64) || !is_aof_fd(uc->di))
        return 0;
    in->start_ns = bpf_ktime_get_ns();
    in->kind = VT_CALL_AOF_WRITE;
    in->bytes = uc->dx;
    in->remaining = uc->dx;
    in->depth = 0;
    return 1;
}

/* ext4's first step for a write: begin the AOF write it belongs to, if any */
static __always_inline int fs_write_step(void)
{
    u32 tid = 0;
    int slot;
    struct user_call uc = {};
    struct inflight_call *in = current_inflight(&slot, &tid);
    if (!in || in->start_ns || current_user_call(&uc) != 0)
        return 0;
    aof_write_from_syscall(in, &uc);
    return 0;
}

/* TP_PROTO(struct inode *inode, loff_t pos, unsigned int len) */
RAW_TRACEPOINT_PROBE(ext4_da_write_begin) { return fs_write_step(); }
RAW_TRACEPOINT_PROBE(ext4_write_begin) { return fs_write_step(); }
#if FS_JOURNAL_START
/* the mtime update (file_modified) starts a journal handle before the first write_begin */
RAW_TRACEPOINT_PROBE(ext4_journal_start_inode) { return fs_write_step(); }
#endif
#endif

/* The cause of an off-CPU interval the current thread begins (cause: from its in-flight call),
 * refined from its saved registers: a stale AOF write dropped, an AOF write blocked before ext4's
 * first step begun, an idle sleep in epoll_wait named. */
static __always_inline u16 switch_cause(struct inflight_call *in, u16 cause, long ps)
{
    struct user_call uc = {};
    if ((cause != VT_CALL_OTHER && cause != VT_CALL_AOF_WRITE) || current_user_call(&uc) != 0)
        return cause;
#if TRACE_FS_SYNC
    /* an AOF write whose end ext4 never reported (it failed before copying everything: ENOSPC,
     * EFBIG...) ends when its thread is inside another syscall (nr -1: not in a syscall, e.g.
     * preempted right after the call-site uprobe) */
    if (cause == VT_CALL_AOF_WRITE && in->remaining && uc.nr >= 0
        && uc.nr != __NR_write && uc.nr != __NR_writev && uc.nr != __NR_pwrite64) {
        in->start_ns = 0;
        cause = VT_CALL_OTHER;
    }
    /* blocked inside write(aof) before ext4's first step: the write begins here */
    if (cause == VT_CALL_OTHER && aof_write_from_syscall(in, &uc))
        return VT_CALL_AOF_WRITE;
#endif
    if (cause == VT_CALL_OTHER && (ps & 1) && is_epoll_wait(uc.nr))
        return VT_CALL_EPOLL_WAIT;
    return cause;
}

#endif

/* Close the current part of slot's off-CPU interval at now: its time to offcpu[cause][state] (the
 * totals restart when the slot's owner changed), and, for the main thread, a timeline event when
 * it is long enough. */
static __always_inline void close_part(int slot, struct offcpu_since_val *since, u32 tid, u64 now)
{
    u64 dur = now - since->start_ns;
    u32 cause = since->cause, state = since->state;
    struct offcpu_slot *o = offcpu.lookup(&slot);
    if (o && cause < VT_CALL_KINDS && state < VT_STATE_KINDS) {
        if (o->tid != tid) {
            #pragma unroll
            for (int c = 0; c < VT_CALL_KINDS; c++) {
                #pragma unroll
                for (int st = 0; st < VT_STATE_KINDS; st++)
                    o->ns[c][st] = 0;
            }
            o->charged_ns = 0;
            o->tid = tid;
        }
        __sync_fetch_and_add(&o->ns[cause][state], dur);
    }
    if (tid == MAIN_TID && dur >= BLOCK_THRESHOLD_NS)
        emit(tid, since->start_ns, dur, cause, state);
}

#if TASK_RUNTIME_OFFSET
/* The kernel charges a run of a thread from its run queue's last clock update, which, when the
 * thread's wake-up preempted the task on its CPU, is not the switch (the update there is skipped)
 * but the wake-up or before it: so the kernel counts as on-CPU the few µs before the switch (16-32
 * µs a run on this project's VM, under a busy loop on the thread's CPU) that sched_switch shows as
 * a wait for a CPU or the end of a sleep. At each switch-out the run's charge (the growth of
 * se.sum_exec_runtime) is compared with its length; what exceeds it moves to on-CPU from the
 * runnable part before the run, then from the blocked part before that, and is counted in
 * charged_ns: the budget is the kernel's own accounting (/proc schedstat agrees), and the recording
 * says how much was moved. */
static __always_inline void align_run(int slot, u32 tid, u64 now)
{
    struct run_state *rs = run_states.lookup(&slot);
    u64 runtime = 0;
    if (!rs)
        return;
    bpf_probe_read_kernel(&runtime, sizeof(runtime), (void *)bpf_get_current_task() + TASK_RUNTIME_OFFSET);
    if (rs->tid == tid && rs->last_runtime && rs->in_ns && runtime > rs->last_runtime && now > rs->in_ns) {
        u64 charged = runtime - rs->last_runtime, ran = now - rs->in_ns;
        u64 move = charged > ran ? charged - ran : 0;
        u64 rest;
        u32 c = rs->rq_cause, bc = rs->blk_cause, bs = rs->blk_state;
        struct offcpu_slot *o = offcpu.lookup(&slot);
        if (move > rs->rq_ns + rs->blk_ns)
            move = rs->rq_ns + rs->blk_ns;
        rest = move > rs->rq_ns ? move - rs->rq_ns : 0;
        move -= rest;
        if (o && o->tid == tid && c < VT_CALL_KINDS && bc < VT_CALL_KINDS && bs < VT_STATE_KINDS) {
            if (move && o->ns[c][VT_STATE_RUNNABLE] >= move) {
                __sync_fetch_and_add(&o->ns[c][VT_STATE_RUNNABLE], -move);
                __sync_fetch_and_add(&o->charged_ns, move);
            }
            if (rest && o->ns[bc][bs] >= rest) {
                __sync_fetch_and_add(&o->ns[bc][bs], -rest);
                __sync_fetch_and_add(&o->charged_ns, rest);
            }
        }
    }
    rs->last_runtime = runtime;
    rs->tid = tid;
    rs->in_ns = 0;
    rs->rq_ns = 0;
    rs->blk_ns = 0;
}

/* The switch-in that ends an off-CPU interval: since holds its last part (runnable after a
 * wake-up or a preemption; else blocked, with no wake-up seen) */
static __always_inline void run_begins(int slot, u32 tid, u64 now, struct offcpu_since_val *since)
{
    struct run_state *rs = run_states.lookup(&slot);
    if (!rs || rs->tid != tid)
        return;
    rs->in_ns = now;
    if (since->state == VT_STATE_RUNNABLE) {
        rs->rq_ns = now - since->start_ns;
        rs->rq_cause = since->cause;
    } else {
        rs->rq_ns = 0;
        rs->blk_ns = now - since->start_ns;
        rs->blk_cause = since->cause;
        rs->blk_state = since->state;
    }
}

/* A wake-up ends the blocked part of an interval */
static __always_inline void blocked_part(int slot, u32 tid, u64 now, struct offcpu_since_val *since)
{
    struct run_state *rs = run_states.lookup(&slot);
    if (!rs || rs->tid != tid)
        return;
    rs->blk_ns = now - since->start_ns;
    rs->blk_cause = since->cause;
    rs->blk_state = since->state;
}
#else
static __always_inline void align_run(int slot, u32 tid, u64 now) {}
static __always_inline void run_begins(int slot, u32 tid, u64 now, struct offcpu_since_val *since) {}
static __always_inline void blocked_part(int slot, u32 tid, u64 now, struct offcpu_since_val *since) {}
#endif

/* A context switch: prev (the current task) goes off-CPU, next comes back on. Both are filtered
 * (tgid, tid range) before anything else: this runs for every switch on the machine. An
 * interval's blocked part ends at the thread's wake-up (on_wakeup); what follows, until it runs,
 * is a wait for a CPU (state runnable), as is all of an interval that began with a preemption. */
static __always_inline int on_switch(long ps, u32 next)
{
    u64 now;
    u32 prev_tid = 0;
    int prev = current_slot(&prev_tid); /* at this tracepoint the current task is still prev */
    int next_slot = slot_of(next);
    struct offcpu_since_val *since;

    if (prev < 0) {
#if TASK_STACK_OFFSET
        /* whatever runs next: on a loaded host it is often the server itself, and a check that
         * ran only when neither side was ours missed most of its sleeps (attach under load) */
        u64 id = bpf_get_current_pid_tgid();
        if ((id >> 32) == CHECK_TGID)
            sysnr_check((u32)id);
#endif
        if (next_slot < 0)
            return 0;
    }
    now = bpf_ktime_get_ns();
    if (prev >= 0) {
        align_run(prev, prev_tid, now);
        since = offcpu_since.lookup(&prev);
        if (since) {
            struct inflight_call *in = inflight.lookup(&prev);
            since->start_ns = now;
            since->tid = prev_tid;
            /* TASK_INTERRUPTIBLE = 1, TASK_UNINTERRUPTIBLE = 2; running or preempted otherwise */
            since->state = (ps & 2) ? VT_STATE_IO : (ps & 1) ? VT_STATE_SLEEPING : VT_STATE_RUNNABLE;
            since->cause = (in && in->start_ns) ? in->kind : VT_CALL_OTHER;
#if TASK_STACK_OFFSET
            if (in)
                since->cause = switch_cause(in, since->cause, ps);
#endif
        }
    }
    if (next_slot < 0)
        return 0;
    since = offcpu_since.lookup(&next_slot);
    if (!since || !since->start_ns || since->tid != next)
        return 0; /* not ours (a neighbour's tid), or no interval began since attach */
    close_part(next_slot, since, next, now);
    run_begins(next_slot, next, now, since);
    since->start_ns = 0;
    return 0;
}

/* A wake-up (the task is put on a run queue): a traced thread's blocked part ends; it waits for
 * a CPU from now until sched_switch runs it. A thread that is runnable already is left alone. */
static __always_inline int on_wakeup(u32 tid)
{
    int slot = slot_of(tid);
    struct offcpu_since_val *since;
    u64 now;
    if (slot < 0)
        return 0;
    since = offcpu_since.lookup(&slot);
    if (!since || !since->start_ns || since->tid != tid || since->state == VT_STATE_RUNNABLE)
        return 0;
    now = bpf_ktime_get_ns();
    close_part(slot, since, tid, now);
    blocked_part(slot, tid, now, since);
    since->start_ns = now;
    since->state = VT_STATE_RUNNABLE;
    return 0;
}

#if TASK_PID_OFFSET
/* Raw sched_switch (no trace record built): TP_PROTO(bool preempt, struct task_struct *prev,
 * struct task_struct *next, unsigned int prev_state). next's pid is read at the byte offset
 * userspace took from this kernel's own BTF (/sys/kernel/btf/vmlinux), never from the
 * (possibly foreign) headers bcc compiles against. A preempted task is runnable whatever state
 * it had set (the formatted tracepoint reports it so too). */
RAW_TRACEPOINT_PROBE(sched_switch)
{
    u32 next_pid = 0;
    bpf_probe_read_kernel(&next_pid, sizeof(next_pid), (void *)ctx->args[2] + TASK_PID_OFFSET);
    return on_switch(ctx->args[0] ? 0 : (long)ctx->args[3], next_pid);
}

/* TP_PROTO(struct task_struct *p) */
RAW_TRACEPOINT_PROBE(sched_wakeup)
{
    u32 pid = 0;
    bpf_probe_read_kernel(&pid, sizeof(pid), (void *)ctx->args[0] + TASK_PID_OFFSET);
    return on_wakeup(pid);
}

#if TASK_TGID_OFFSET
/* a new thread of the target waits for its first CPU from here */
RAW_TRACEPOINT_PROBE(sched_wakeup_new)
{
    u32 pid = 0, tgid = 0;
    void *p = (void *)ctx->args[0];
    bpf_probe_read_kernel(&tgid, sizeof(tgid), p + TASK_TGID_OFFSET);
    if (tgid != TARGET_TGID)
        return 0;
    bpf_probe_read_kernel(&pid, sizeof(pid), p + TASK_PID_OFFSET);
    int slot = slot_of(pid);
    struct offcpu_since_val *since = slot < 0 ? 0 : offcpu_since.lookup(&slot);
    if (!since)
        return 0;
    since->start_ns = bpf_ktime_get_ns();
    since->tid = pid;
    since->cause = VT_CALL_OTHER;
    since->state = VT_STATE_RUNNABLE;
    return 0;
}
#endif
#else
TRACEPOINT_PROBE(sched, sched_switch)
{
    return on_switch(args->prev_state, args->next_pid);
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
    return on_wakeup(args->pid);
}
#endif
#endif

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
int on_shim_sync_return(struct pt_regs *ctx) { return end_call(-1, 1); }
