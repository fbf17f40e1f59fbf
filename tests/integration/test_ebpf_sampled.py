"""An observing window's sampled AOF writes (tracers/sampling.py) against the server's own write(2) calls on
its AOF file, counted by a separate BPF program on the syscall's tracepoint (no ext4 tracepoint, no sampling),
with a busy loop beside the server: the contention under which the share of the time misled the estimate
(0.43-0.58 of the truth; its bursts: 3 to 59 fdatasyncs per 125 ms)."""
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration

COUNTER = b"""
BPF_ARRAY(aof_fd, u32, 1);
BPF_ARRAY(aof_writes, u64, 1);
TRACEPOINT_PROBE(syscalls, sys_enter_write) {
    int zero = 0;
    u32 *fd = aof_fd.lookup(&zero);
    u64 *n = aof_writes.lookup(&zero);
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_TGID || !fd || !n || args->fd != *fd)
        return 0;
    __sync_fetch_and_add(n, 1);
    return 0;
}
"""


def test_the_sampled_estimate_is_the_servers_aof_writes_under_contention(needs_bpf):
    from valkeytrace.analysis.server import estimated
    from valkeytrace.recording.model import Histogram, decode_as
    from valkeytrace.server import threads as thr
    from valkeytrace.server.process import AttachedServer, EmbeddedServer
    from valkeytrace.tracers import bcc_child
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.workload import keyspace
    from valkeytrace.workload.benchmark import ENDLESS_REQUESTS, ClientProcess, client_argv
    from valkeytrace.workload.clients import find_client

    srv = EmbeddedServer(appendfsync="always", io_threads=2)
    loads, hogs, tracer, counter = [], [], None, None
    try:
        keyspace.fill(srv.client(), 2000, 64)
        client = find_client()
        loads = [ClientProcess(client_argv(client, srv.host, srv.port, test, c, 64, 2000, ENDLESS_REQUESTS))
                 for test, c in (("SET", 4), ("GET", 16))]
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
        tracer = EbpfTracer()
        tracer.start(AttachedServer(srv.pid))  # as record --attach observes it
        counter = bcc_child.compile_program(COUNTER, [f"-DTARGET_TGID={srv.pid}"], cache=False)
        (fd,) = [f for f in thr.aof_fds(srv.pid, tracer.aof_dir) if "incr" in os.readlink(f"/proc/{srv.pid}/fd/{f}")]
        counter[b"aof_fd"].put(0, fd)
        n = counter[b"aof_writes"]
        time.sleep(0.3)
        out0 = n.value(0)
        tracer.window_begin(observe=True)
        in0 = n.value(0)
        time.sleep(2.0)  # two sampled quarter seconds, as record --attach --duration 2
        in1 = n.value(0)
        w = tracer.window_end()
        out1 = n.value(0)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        for lp in loads:
            lp.stop()
        if counter is not None:
            counter.cleanup()
        if tracer is not None:
            tracer.stop()
        srv.stop()
    main = next(t for t in w["threads"] if t["tid"] == srv.pid)
    share = w["probe"]["sampled"]["aof_write"]
    sample = decode_as(main["calls"]["aof_write"], Histogram)
    est = estimated(sample, share).count  # as the report counts them
    inner, outer = in1 - in0, out1 - out0
    assert inner >= 20, (inner, outer)  # enough writes for the bounds below to mean something
    assert sample.count < est  # a sample: the programs were detached part of the window
    # the truth lies between the inner and outer counts: the estimate within the uncertainty it states from its
    # own spans' spread (3 standard errors, +1 for the count's rounding), which is itself at most 10%: at worst
    # 0.7-1.3 of the truth (the old test's 0.7-1.4 of the fdatasyncs). Beside a busy loop it read 1.000-1.005 of
    # the write calls in 8 windows of 2 s (2026-12-07), where the share of the time read 0.58-1.07; main's read
    # 0.49-0.72 here in 3 of 3 runs (no uncertainty stated: held to the count's rounding)
    miss = max(inner - est, est - outer, 0)
    rse = w["probe"].get("sampled_rse", {}).get("aof_write", 0.0)
    assert miss <= 3 * rse * est + 1, (est, inner, outer, share, rse, sample.count)
    assert 0 < rse <= 0.1, w["probe"]
