/*
 * selftest.bpf.c: counts fdatasync(2) entries made by one process (tgid TARGET_TGID).
 *
 * Used by `valkeytrace doctor` to prove that bcc can compile against the installed kernel
 * headers, that the syscalls tracepoints attach, and that maps read back; and by a test that
 * makes a known number of calls. Tracepoint arguments only: no kernel struct is read.
 */
BPF_ARRAY(fdatasync_calls, u64, 1);

TRACEPOINT_PROBE(syscalls, sys_enter_fdatasync)
{
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_TGID)
        return 0;
    int zero = 0;
    u64 *count = fdatasync_calls.lookup(&zero);
    if (count)
        __sync_fetch_and_add(count, 1);
    return 0;
}
