/*
 * vt_calllog.bpf.h: each CPU's log of the fsyncs and AOF writes its threads ended (put in its place
 * as text in probes/valkey_threads.bpf.c, after `lost` and `account`). The tracer mmaps the array and
 * takes the records in place (csrc/events.c): a call costs one record's stores and the head's, on lines
 * only this CPU writes. A ring buffer record took its lock, its producer and consumer positions and its
 * data, on four pages: ~100-170 ns a call here, the most of any part of the probe (docs/performance.md).
 * Two programs never write one CPU's log at once: ext4's tracepoints and the uprobes run with
 * preemption off, and no interrupt logs a call.
 * CALL_LOG_BITS: log2 of the records a CPU's log holds; CALL_LOG_CPUS: the possible CPUs.
 */
struct vt_call_log {
    struct vt_call_log_head h;
    struct vt_block_event rec[VT_CALL_LOG_SIZE(CALL_LOG_BITS)];
};
BPF_F_TABLE("array", u32, struct vt_call_log, call_logs, CALL_LOG_CPUS, BPF_F_MMAPABLE);

/* 1 when the call went into its CPU's log; 0 when the log was full (counted in `lost`) */
static __always_inline int log_call(u32 tid, u64 start_ns, u64 dur, u32 kind, u32 bytes)
{
    u32 cpu = bpf_get_smp_processor_id();
    struct vt_call_log *l = call_logs.lookup(&cpu);
    u64 head;
    if (!l)
        return 0;
    head = l->h.head;
    if (head - *(volatile u64 *)&l->h.tail >= VT_CALL_LOG_SIZE(CALL_LOG_BITS)) {
        int zero = 0;
        u64 *lost_n = lost.lookup(&zero);
        if (lost_n)
            __sync_fetch_and_add(lost_n, 1);
        return 0;
    }
    struct vt_block_event *ev = &l->rec[head & (VT_CALL_LOG_SIZE(CALL_LOG_BITS) - 1)];
    ev->start_ns = start_ns;
    ev->duration_ns = dur;
    ev->tid = tid;
    ev->cause = kind;
    ev->state = VT_EVENT_CALL;
    ev->bytes = bytes;
    ev->pad = 0;
    asm volatile("" ::: "memory"); /* the record before the head that publishes it (x86: stores in order) */
    *(volatile u64 *)&l->h.head = head + 1;
    return 1;
}
