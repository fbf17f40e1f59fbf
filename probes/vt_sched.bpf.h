/*
 * vt_sched.bpf.h: the scheduler's side of probes/valkey_threads.bpf.c (put in its place as text
 * by valkeytrace's probe_source: bcc rewrites map calls in the program's own text only): each traced thread's off-CPU intervals by cause and state, the wait
 * for a CPU after a preemption or a wake-up, the kernel's charge of a run, and the syscall a
 * switched-out thread was in (read from its saved registers). It uses the helpers defined above
 * its #include (emit, account, slot_of, the in-flight calls) and defines nothing they need.
 */
#if TRACE_SCHED
#if TASK_STACK_OFFSET
#define VT_USER_CALL 1 /* current_user_call() below: the current thread's syscall and its arguments */
#include <asm/unistd.h>
/* The byte offset of the saved user orig_ax (the syscall number) past task_struct.stack:
 * THREAD_SIZE - stack padding - sizeof(struct pt_regs) + offsetof(orig_ax). Userspace checks the
 * candidates against a thread of its own sleeping in clock_nanosleep (its tid in check_tid),
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

static __always_inline void sysnr_check(void)
{
    int zero = 0;
    u32 *want = check_tid.lookup(&zero); /* an array's lookup, inlined: only while a check runs is it set */
    void *task;
    if (!want || !*want || *want != (u32)bpf_get_current_pid_tgid())
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
    if (!off || !*off)
        return -1;
#if TASK_PT_REGS
    /* the kernel's own pointer to them (5.15+), read by plain loads the verifier checks against
     * struct pt_regs's BTF: no probe-read call, no read of task->stack (~60 ns a write here) */
    u64 r = (u64)bpf_task_pt_regs(bpf_get_current_task_btf());
    if (!r)
        return -1;
    uc->dx = *(volatile u64 *)(r + 96); /* x86-64 struct pt_regs: dx, si, di, orig_ax */
    uc->si = *(volatile u64 *)(r + 104);
    uc->di = *(volatile u64 *)(r + 112);
    uc->nr = *(volatile long *)(r + 120);
    return 0;
#else
    void *stack = 0;
    if (bpf_probe_read_kernel(&stack, sizeof(stack), (void *)bpf_get_current_task() + TASK_STACK_OFFSET) != 0
        || !stack)
        return -1;
    return bpf_probe_read_kernel(uc, sizeof(*uc), stack + *off - 3 * sizeof(u64));
#endif
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
        sysnr_check();
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
            /* TASK_UNINTERRUPTIBLE (2): in I/O; interruptible (1), stopped (4: SIGSTOP), traced (8), exiting
             * (0x10, 0x20, 0x80: its last switch), parked (0x40), idle (0x80/0x400): not waiting for a CPU;
             * running (0) or preempted (0, or 0x100 from the formatted tracepoint): runnable */
            since->state = (ps & 2) ? VT_STATE_IO : (ps & 0x4fd) ? VT_STATE_SLEEPING : VT_STATE_RUNNABLE;
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
