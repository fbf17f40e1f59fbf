#ifndef VT_BPFSTATS_H
#define VT_BPFSTATS_H

/* An fd that keeps the kernel's BPF run-time statistics on while it is open, or -errno */
int vt_bpf_enable_stats(void);

#endif
