/*
 * vt_durable.bpf.c: what each fsync/fdatasync of one server made durable, from the kernel's tracepoints
 * only (no kprobes): record --verify-durability power-cut, loaded beside the main probes by
 * tracers/durable_bpf.py. Each record has csrc/shim_durable.h's layout (struct vt_dur_event), so that
 * workload/boundary.py replays the shim's log and this one alike:
 *   - ext4_sync_file_enter (raw: struct file *): SYNC_BEGIN, the inode and its size (i_size) then;
 *   - ext4_sync_file_exit (raw: struct inode *, int ret): SYNC_END, 1 when it succeeded;
 *   - ext4_allocate_inode: CREATE (a new file or directory; its name from the directory's listing);
 *   - rename/renameat/renameat2 entered: RENAME, the new path's last 31 bytes (its inode from the listing).
 * The server (tgid TARGET_TGID) and the children it forks (an AOF rewrite, a snapshot). The records go to
 * an array in order of a shared counter; past its end they are counted, not kept (the reader says so).
 */
#include <linux/fs.h>
#include <linux/sched.h>

#define DUR_SYNC_BEGIN 1
#define DUR_SYNC_END 2
#define DUR_CREATE 3
#define DUR_RENAME 4
#define NAME_SCAN 128

struct dur_event {  /* struct vt_dur_event */
    u64 ns;
    u64 ino;
    u64 value;
    u32 kind;
    u32 tid;
    char name[32];
};

BPF_ARRAY(durlog, struct dur_event, DUR_CAPACITY);
BPF_ARRAY(durnext, u64, 1);
struct dur_path {
    char s[NAME_SCAN + 32];
};
BPF_PERCPU_ARRAY(durpath, struct dur_path, 1);

static __always_inline int ours(void)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (tgid == TARGET_TGID)
        return 1;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    return t->real_parent->tgid == TARGET_TGID;
}

static __always_inline struct dur_event *take(u32 kind, u64 ino, u64 value)
{
    u32 zero = 0;
    u64 *next = durnext.lookup(&zero);
    if (!next)
        return 0;
    u32 i = (u32)__sync_fetch_and_add(next, 1);
    if (i >= DUR_CAPACITY)
        return 0;
    struct dur_event *e = durlog.lookup(&i);
    if (!e)
        return 0;
    e->ns = bpf_ktime_get_ns();
    e->ino = ino;
    e->value = value;
    e->kind = kind;
    e->tid = (u32)bpf_get_current_pid_tgid();
    return e;
}

RAW_TRACEPOINT_PROBE(ext4_sync_file_enter)
{
    if (!ours())
        return 0;
    struct file *f = (struct file *)ctx->args[0];
    struct inode *in = f->f_inode;
    take(DUR_SYNC_BEGIN, in->i_ino, (u64)in->i_size);
    return 0;
}

RAW_TRACEPOINT_PROBE(ext4_sync_file_exit)
{
    if (!ours())
        return 0;
    struct inode *in = (struct inode *)ctx->args[0];
    take(DUR_SYNC_END, in->i_ino, (int)ctx->args[1] == 0);
    return 0;
}

TRACEPOINT_PROBE(ext4, ext4_allocate_inode)
{
    if (ours())
        take(DUR_CREATE, args->ino, args->dir);
    return 0;
}

static __always_inline int renamed(const char *path)
{
    u32 zero = 0;
    struct dur_path *p = durpath.lookup(&zero);
    if (!p || !ours())
        return 0;
    int n = bpf_probe_read_user_str(p->s, NAME_SCAN, path); /* with its NUL */
    int off = n > 32 ? n - 32 : 0; /* the path's last 31 bytes (workload/boundary.py reads its last component) */
    struct dur_event *e = take(DUR_RENAME, 0, 0);
    if (e)
        bpf_probe_read_kernel_str(e->name, sizeof(e->name), p->s + (off & (NAME_SCAN - 1)));
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_rename) { return renamed(args->newname); }
TRACEPOINT_PROBE(syscalls, sys_enter_renameat) { return renamed(args->newname); }
TRACEPOINT_PROBE(syscalls, sys_enter_renameat2) { return renamed(args->newname); }
