/*
 * shim_durable.h: the durable-boundary log (csrc/shim_durable.c; record --verify-durability power-cut).
 * One layout for both writers: the shim (mapped file $VALKEYTRACE_DURABLE_LOG) and the eBPF helper
 * (probes/vt_durable.bpf.c via tracers/durable_bpf.py, which writes the same records to a file);
 * workload/boundary.py reads either and replays it into each file's durable bytes.
 */
#ifndef VT_SHIM_DURABLE_H
#define VT_SHIM_DURABLE_H

#include <stdint.h>

#define VT_DUR_MAGIC 0x31676f6c72756476ull /* "vdurlog1" */
#define VT_DUR_CAPACITY (1u << 20)         /* records (64 MB, sparse: only what is written takes pages) */

#define VT_DUR_SYNC_BEGIN 1 /* fsync/fdatasync entered on ino: value = the file's size then */
#define VT_DUR_SYNC_END 2   /* the same thread's sync returned: value = 1 when it succeeded */
#define VT_DUR_CREATE 3     /* ino created (name: its basename when known) */
#define VT_DUR_RENAME 4     /* a rename made name point at ino */

struct vt_dur_event {
    uint64_t ns;  /* CLOCK_MONOTONIC (the kernel's bpf_ktime_get_ns) */
    uint64_t ino;
    uint64_t value;
    uint32_t kind;
    uint32_t tid;
    char name[32];
};

struct vt_dur_log {
    uint64_t magic;
    uint64_t capacity;
    uint64_t next;    /* records taken (past capacity: dropped) */
    uint64_t mapped_by; /* the first process that mapped it (0: no shim ever did) */
    uint64_t pad[4];
    struct vt_dur_event ev[];
};

/* the shim's side: 0 when no log is mapped (every hook a no-op) */
void vt_dur_init(void);
uint64_t vt_dur_sync_begin(int fd);
void vt_dur_sync_end(uint64_t ino, int ret);

#endif
