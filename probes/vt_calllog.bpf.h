/*
 * vt_calllog.bpf.h: each CPU's log of the fsyncs and AOF writes its threads ended (put in its place
 * as text in probes/valkey_threads.bpf.c, after `count_lost`, `fill_event` and `account`). The tracer mmaps the array and
 * takes the records in place (csrc/events.c): a call costs one record's stores and the head's, on lines
 * only this CPU writes. A ring buffer record took its lock, its producer and consumer positions and its
 * data, on four pages: ~100-170 ns a call here, the most of any part of the probe (docs/performance.md).
 * Two programs never write one CPU's log at once: only calls ended in ext4's tracepoints are logged
 * here, and those run with preemption off (a uprobe's program, or a syscall tracepoint's, can be
 * preempted: their calls go through the ring buffer), and no interrupt logs a call.
 * CALL_LOG_BITS: log2 of the records a CPU's log holds; CALL_LOG_CPUS: the possible CPUs.
 */
/* CPU c's log is the CALL_LOG_STRIDE elements from c * CALL_LOG_STRIDE: its head (in the first, the
 * tail in the third: the header's 128 bytes) and its records. One record an element, not one log: bcc
 * generates code for every element of a value's array (a 32K-record value took 16 s to compile). */
#define CALL_LOG_RECORDS VT_CALL_LOG_SIZE(CALL_LOG_BITS)
#define CALL_LOG_STRIDE (CALL_LOG_RECORDS + sizeof(struct vt_call_log_head) / sizeof(struct vt_block_event))
BPF_F_TABLE("array", u32, struct vt_block_event, call_logs, CALL_LOG_CPUS * CALL_LOG_STRIDE, BPF_F_MMAPABLE);

/* 1 when the call went into its CPU's log; 0 when the log was full (counted in `lost`) */
static __always_inline int log_call(u32 tid, u64 start_ns, u64 dur, u32 kind, u32 bytes)
{
    u32 at = bpf_get_smp_processor_id() * CALL_LOG_STRIDE, tail_at = at + 2, rec_at;
    u64 *head = (u64 *)call_logs.lookup(&at), *tail = (u64 *)call_logs.lookup(&tail_at), h;
    struct vt_block_event *ev;
    if (!head || !tail)
        return 0;
    h = *head;
    rec_at = at + 4 + (u32)(h & (CALL_LOG_RECORDS - 1));
    ev = h - *(volatile u64 *)tail < CALL_LOG_RECORDS ? call_logs.lookup(&rec_at) : 0;
    if (!ev)
        return count_lost();
    fill_event(ev, tid, start_ns, dur, kind, VT_EVENT_CALL, bytes);
    asm volatile("" ::: "memory"); /* the record before the head that publishes it (x86: stores in order) */
    *(volatile u64 *)head = h + 1;
    return 1;
}
