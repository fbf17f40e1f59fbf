/*
 * vt_fswrite.bpf.h: fdatasync/fsync and AOF write(2) from ext4's own tracepoints (TRACE_FS_SYNC), put in
 * its place as text in probes/valkey_threads.bpf.c after vt_sched.bpf.h, whose reads of a thread's saved
 * registers (current_user_call, VT_USER_CALL) it uses to tell an AOF write. The tracepoints are raw (no
 * trace record built) and run only when some process syncs or writes an ext4 file, never for other
 * syscalls; each costs far less than a uprobe hit inside valkey-server (docs/performance.md has both).
 */
#if TRACE_FS_SYNC
/* fdatasync/fsync: ext4_sync_file enter/exit, on every thread. The time is the filesystem's sync:
 * the whole call but the syscall entry and fd lookup (well under a microsecond).
 * TP_PROTO(struct file *file, int datasync) / TP_PROTO(struct inode *inode, int ret). */
RAW_TRACEPOINT_PROBE(ext4_sync_file_enter)
{
    return call_enter(ctx->args[1] ? VT_CALL_FDATASYNC : VT_CALL_FSYNC, 0);
}

RAW_TRACEPOINT_PROBE(ext4_sync_file_exit)
{
    return call_exit(-1, 1);
}

#define REMAINING_UNKNOWN (~0ull) /* an AOF write begun from its inode: its length not read (write_copied) */

#if VT_USER_CALL
/* The inode pointers of the target's AOF files, as their writes showed them (fs_write_step): a
 * write_begin on one of them begins an AOF write without reading the thread's saved registers (one
 * compare on a line, against two reads of the task's memory and the fd's lookup: ~200 ns a write
 * here). Only a write(2)-family call reaches write_begin. The tracer zeroes the set whenever the
 * server's AOF fds change (a rewrite's new file, the old ones deleted), so a pointer is not kept
 * long past the file it named: until the tracer's next look at the AOF directory (a second at most). */
#define AOF_INODES 8
struct aof_inode_set {
    u64 ptr[AOF_INODES];
};
BPF_ARRAY(aof_inodes, struct aof_inode_set, 1);

static __always_inline int known_aof_inode(struct aof_inode_set *s, u64 inode)
{
#pragma unroll
    for (int i = 0; i < AOF_INODES; i++)
        if (s->ptr[i] == inode)
            return 1;
    return 0;
}

static __always_inline void remember_aof_inode(struct aof_inode_set *s, u64 inode)
{
    u32 at = (u32)(inode >> 6) & (AOF_INODES - 1); /* a full set: one replaced */
#pragma unroll
    for (int i = AOF_INODES - 1; i >= 0; i--)
        if (!s->ptr[i])
            at = i;
    s->ptr[at & (AOF_INODES - 1)] = inode;
}

/* ext4's first step for a write of inode at pos: begin the AOF write it belongs to, if any. fast: a
 * write_begin, which only a write(2)-family call reaches: a known AOF inode is enough. Otherwise the
 * saved registers say whether it is a write(2) on an AOF fd (and its length); an AOF write's inode is
 * remembered. */
static __always_inline int fs_write_step(u64 inode, u64 pos, int fast)
{
    u32 tid = 0, zero = 0;
    int slot;
    struct user_call uc = {};
    struct aof_inode_set *s = aof_inodes.lookup(&zero);
    struct inflight_call *in = current_inflight(&slot, &tid);
    if (!in || in->start_ns || !s || !inode)
        return 0;
    if (fast && known_aof_inode(s, inode)) {
        in->start_ns = bpf_ktime_get_ns();
        in->kind = VT_CALL_AOF_WRITE;
        in->bytes = 0;
        in->remaining = REMAINING_UNKNOWN;
        in->pos0 = pos;
        in->depth = 0;
        return 0;
    }
    if (current_user_call(&uc) == 0 && aof_write_from_syscall(in, &uc))
        remember_aof_inode(s, inode);
    return 0;
}

/* TP_PROTO(struct inode *inode, loff_t pos, unsigned int len) */
RAW_TRACEPOINT_PROBE(ext4_da_write_begin) { return fs_write_step(ctx->args[0], ctx->args[1], 1); }
RAW_TRACEPOINT_PROBE(ext4_write_begin) { return fs_write_step(ctx->args[0], ctx->args[1], 1); }
#if FS_CTIME_START
/* The mtime update (file_modified -> inode_set_ctime_current -> ext4_dirty_inode's journal start)
 * comes before the first write_begin: a write blocked in it (the inode's journal handle) begins at
 * its ctime update. Kernels with multigrain timestamps (6.13+) trace that update once per changed
 * time (ext4 has them since): ~1 run per 10 writes in check 31 here, against 1.3 a write for
 * ext4_journal_start_inode, whose starts after a write's last folio (the size update) and inside
 * fsync's writeback must not begin one. Not only writes update it (a truncate does): the registers
 * are read. TP_PROTO(struct inode *, u32 old, u32 new, u32 cur) */
RAW_TRACEPOINT_PROBE(ctime_ns_xchg) { return fs_write_step(ctx->args[0], 0, 0); }
#elif FS_JOURNAL_START
/* Before 6.13: the mtime update's journal start (ext4_dirty_inode) begins it. ext4_da_write_end
 * starts one too, after a write's last folio (the size update): that one must not begin another
 * write (it would run until the next call's begin). Only a start called from ext4_dirty_inode
 * begins one: its code's [start, end) from /proc/kallsyms in dirty_inode_ip
 * (tracers/ebpf_pool.set_journal_caller); [0, 0): any caller.
 * TP_PROTO(struct inode *, int blocks, int rsv_blocks, int revoke_creds, int type, unsigned long IP) */
BPF_ARRAY(dirty_inode_ip, u64, 2);
RAW_TRACEPOINT_PROBE(ext4_journal_start_inode)
{
    int lo = 0, hi = 1;
    u64 *a = dirty_inode_ip.lookup(&lo), *b = dirty_inode_ip.lookup(&hi);
    u64 ip = ctx->args[5];
    if (a && b && *b && (ip < *a || ip >= *b))
        return 0;
    return fs_write_step(ctx->args[0], 0, 0);
}
#endif
#endif

/* An AOF write ends when ext4 has copied its bytes into the page cache: the write_end of its last
 * folio (one per folio; TP_PROTO(struct inode *inode, loff_t pos, unsigned int len, unsigned int
 * copied)). Not in the figure: the syscall's return path after that copy (unlock, fsnotify), under a
 * microsecond. It begins (fs_write_step above, when the saved registers can be read) at ext4's first
 * step for it: the mtime update (its ctime, or its journal start), or the write_begin of its first
 * folio, or, when the thread blocks before either (the inode lock, the journal), at that context
 * switch: every blocked moment is in it, the few on-CPU microseconds of syscall entry and fd lookup
 * before ext4 is reached are not. Without the registers it begins at its call site (one uprobe,
 * on_site_aof_write, the length in its third argument).
 * Its length known, the write ends when that many bytes were copied. Begun from its inode (length
 * unread), a folio the copy did not fill to a page boundary is its last: a write's other folios
 * end on one (a chunk or a folio ends on a page boundary); only a write that does end on a page
 * boundary, or a short copy, has its registers read to tell. */
static __always_inline int write_copied(u64 pos, u32 len, u32 copied)
{
    u32 tid = 0;
    int slot;
    struct inflight_call *in = current_inflight(&slot, &tid);
    if (!in || !in->start_ns || in->kind != VT_CALL_AOF_WRITE || in->depth)
        return 0;
#if VT_USER_CALL
    if (in->remaining == REMAINING_UNKNOWN) {
        u64 done = pos + copied - in->pos0;
        struct user_call uc = {};
        if ((copied < len || !((pos + copied) & 4095)) && current_user_call(&uc) == 0
            && (uc.nr == __NR_write || uc.nr == __NR_pwrite64) && done < uc.dx) {
            in->bytes = uc.dx; /* a folio of a longer write: its length is known from here */
            in->remaining = uc.dx - done;
            return 0;
        }
        return end_call_of(in, slot, tid, (long)done, 0, 1);
    }
#endif
    if (copied < in->remaining) {
        in->remaining -= copied;
        return 0;
    }
    return end_call_of(in, slot, tid, -1, 0, 1); /* the thread's call found once, not again */
}

RAW_TRACEPOINT_PROBE(ext4_da_write_end) { return write_copied(ctx->args[1], ctx->args[2], ctx->args[3]); }
RAW_TRACEPOINT_PROBE(ext4_write_end) { return write_copied(ctx->args[1], ctx->args[2], ctx->args[3]); }
RAW_TRACEPOINT_PROBE(ext4_journalled_write_end) { return write_copied(ctx->args[1], ctx->args[2], ctx->args[3]); }
#endif
