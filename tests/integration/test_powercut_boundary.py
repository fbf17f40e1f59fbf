"""The durable boundary against a known truth: a process whose writes and syncs this test makes itself (one
fsync withheld, a file created and renamed with and without its directory's fsync), traced by the shim (no
privileges) and by the kernel's tracepoints (tracers/durable_bpf.py), replayed by workload/boundary.py."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from valkeytrace.tracers.emulation import shim_library
from valkeytrace.workload import boundary

pytestmark = pytest.mark.integration

# What the child does, in order (the cut comes after its last step):
#   a.aof: 1000 B, fdatasync; 500 B, fsync; 300 B (never synced)          -> durable 1500 of 1800
#   b.aof: created, 200 B, fdatasync, its directory fsynced               -> present, durable 200
#   c.aof: created, 100 B, fdatasync; its directory NOT fsynced after     -> absent
#   m.tmp -> m.manifest: 50 B, fsync, renamed; the directory fsynced      -> present, durable 50
#   n.tmp -> n.manifest: 40 B, fsync, renamed after the last directory fsync -> absent
CHILD = textwrap.dedent("""
    import os, sys
    d = sys.argv[1]
    sys.stdin.readline()  # the tracers are attached
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    a = os.open(os.path.join(d, "a.aof"), os.O_WRONLY | os.O_APPEND)
    os.write(a, b"x" * 1000); os.fdatasync(a)
    os.write(a, b"y" * 500); os.fsync(a)
    os.write(a, b"z" * 300)
    b = os.open(os.path.join(d, "b.aof"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(b, b"b" * 200); os.fdatasync(b)
    m = os.open(os.path.join(d, "m.tmp"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(m, b"m" * 50); os.fsync(m); os.close(m)
    os.rename(os.path.join(d, "m.tmp"), os.path.join(d, "m.manifest"))
    os.fsync(dfd)
    c = os.open(os.path.join(d, "c.aof"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(c, b"c" * 100); os.fdatasync(c)
    n = os.open(os.path.join(d, "n.tmp"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(n, b"n" * 40); os.fsync(n); os.close(n)
    os.rename(os.path.join(d, "n.tmp"), os.path.join(d, "n.manifest"))
    print("done", flush=True)
    sys.stdin.readline()
""")
TRUTH = {"a.aof": 1500, "b.aof": 200, "c.aof": None, "m.manifest": 50, "n.manifest": None}


def _run(tmp_path, with_bpf: bool):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.aof").write_bytes(b"")
    os.sync()  # a.aof and its name durable before the trace begins (the baseline)
    log = str(tmp_path / "durable.log")
    boundary.new_shim_log(log)
    env = {**os.environ, "LD_PRELOAD": shim_library(), "VALKEYTRACE_DURABLE_LOG": log}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env, text=True)
    probe = None
    try:
        base = boundary.baseline(boundary.listing(str(data), ()))
        if with_bpf:
            from valkeytrace.tracers.durable_bpf import DurableProbe

            probe = DurableProbe(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        cut = time.monotonic_ns()
        files = boundary.listing(str(data), ())
        shim = boundary.read_shim_log(log)
        assert shim is not None
        traces = {"shim": boundary.Trace(shim[0], base, shim[1])}
        if probe is not None:
            events, dropped = probe.events(boundary.EVENT)
            traces["ebpf"] = boundary.Trace(events, base, dropped)
        return {side: boundary.boundaries(t, files, cut) for side, t in traces.items()}, files
    finally:
        child.stdin.close()
        child.wait(10)
        if probe is not None:
            probe.close()


def test_shim_boundary_matches_what_the_process_synced(tmp_path):
    got, files = _run(tmp_path, with_bpf=False)
    assert {f.name: f.size for f in files} == {"a.aof": 1800, "b.aof": 200, "c.aof": 100, "m.manifest": 50,
                                               "n.manifest": 40}
    assert got["shim"] == TRUTH


def test_kernel_boundary_matches_the_truth_and_the_shim(tmp_path, needs_bpf):
    got, _ = _run(tmp_path, with_bpf=True)
    assert got["ebpf"] == TRUTH
    assert got["shim"] == TRUTH


def test_a_sync_that_had_not_returned_by_the_cut_covers_nothing():
    ev = boundary.EVENT
    events = boundary.np.array([(10, 7, 100, boundary.SYNC_BEGIN, 1, b""), (20, 7, 1, boundary.SYNC_END, 1, b""),
                                (30, 7, 250, boundary.SYNC_BEGIN, 1, b""), (40, 7, 1, boundary.SYNC_END, 1, b""),
                                (50, 7, 400, boundary.SYNC_BEGIN, 2, b""), (60, 7, 0, boundary.SYNC_END, 2, b"")],
                               dtype=ev)
    f = [boundary.FileEntry("x.aof", 7, 1, 500)]
    t = boundary.Trace(events, {7: 0, 1: 0})
    assert boundary.boundaries(t, f, 35) == {"x.aof": 100}   # the second sync entered, not returned
    assert boundary.boundaries(t, f, 45) == {"x.aof": 250}
    assert boundary.boundaries(t, f, 99) == {"x.aof": 250}   # the third failed
