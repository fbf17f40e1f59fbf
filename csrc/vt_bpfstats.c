/* The kernel's BPF run-time statistics (each program's run_cnt and run_time_ns in its fdinfo), on for
 * as long as this process holds an fd: bpf(BPF_ENABLE_STATS, BPF_STATS_RUN_TIME) (Linux 5.8+). The
 * kernel counts the holders, so two tracers at once each keep them on for their own windows, a tracer
 * that is killed gives its hold back with its fds, and kernel.bpf_stats_enabled (the sysctl, a hold of
 * its own) is never written. glibc has no wrapper: the command and its attribute are spelled out from
 * the kernel's uapi (include/uapi/linux/bpf.h: BPF_ENABLE_STATS is command 32, BPF_STATS_RUN_TIME 0). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vt_bpfstats.h"

#define VT_BPF_ENABLE_STATS 32
#define VT_BPF_STATS_RUN_TIME 0

int vt_bpf_enable_stats(void)
{
#ifdef SYS_bpf
    uint32_t type = VT_BPF_STATS_RUN_TIME; /* union bpf_attr's enable_stats: the kernel zeroes the rest */
    long fd = syscall(SYS_bpf, VT_BPF_ENABLE_STATS, &type, sizeof type);
    return fd < 0 ? -errno : (int)fd;
#else
    return -ENOSYS;
#endif
}
