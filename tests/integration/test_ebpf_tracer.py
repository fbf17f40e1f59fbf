"""The eBPF tracer driven directly on a child process of the test's own, as record --attach loads it: what a
thread's slot, an AOF write's begin and end are when the child's threads churn, fsync on another thread,
or write to a page boundary. Each against the child's own truth (its tids, its writes' count and bytes)."""
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.integration


def stop_both(tracer, child) -> None:
    """The tracer stopped (if it started), then the traced child told to exit and waited for."""
    if tracer is not None:
        tracer.stop()
    child.stdin.write("stop\n")
    child.stdin.close()
    child.wait(timeout=10)


def attached_tracer(pid: int, aof_dir):
    """The eBPF tracer on process pid as record --attach loads it (no program on every switch: a switch inside
    another syscall would end a write), its records' sources open."""
    from valkeytrace.tracers import ebpf_events, ebpf_pool
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.tracers.ebpf_plan import SWITCH_TRACEPOINTS

    tracer = EbpfTracer()
    tracer.pid, tracer.aof_dir = pid, str(aof_dir)
    p = tracer.plan(None, str(aof_dir), attached=True)
    _, _, idle = tracer._load(p, None)
    # an AOF write is told from the thread's saved registers: the syscall number's offset found
    assert p.fs_sync and idle, (p, idle, tracer._defines)
    tracer._events = ebpf_events.Events(tracer.bpf, tracer._defines)
    ebpf_pool.detach_named(tracer.bpf, SWITCH_TRACEPOINTS)
    ebpf_pool.set_target(tracer.bpf, pid)
    return tracer


def main_aof_writes(win: dict, pid: int, tracer) -> dict:
    """The AOF writes the window counted on thread pid (the process's main thread), asserted present."""
    main = next(t for t in win["threads"] if t["tid"] == pid)
    assert "aof_write" in main["calls"], (main, tracer._defines, win["lost_events"])
    return main["calls"]["aof_write"]


CHURN = """
import sys, threading, time
for _ in range(70):  # burn the tids of the direct slots: the threads below get extra slots
    t = threading.Thread(target=lambda: None); t.start(); t.join()
stop = threading.Event()
def sleeper(n):
    for _ in range(n):
        if stop.is_set():
            return
        time.sleep(0.01)
sys.stdin.readline()  # the tracer is loaded
a = threading.Thread(target=sleeper, args=(200,)); a.start()
print("A", a.native_id, flush=True); a.join()
time.sleep(2.5)  # the tracer's refresh (a poll a second, on the tids' change) frees A's slot before B exists
b = threading.Thread(target=sleeper, args=(10 ** 6,)); b.start()
print("B", b.native_id, time.monotonic(), flush=True)
sys.stdin.readline()
stop.set(); b.join()
"""


def test_a_slot_that_changes_hands_starts_its_new_thread_from_zero(needs_bpf, tmp_path):
    """Thread churn: thread A (an extra slot: its tid is past the direct range) sleeps 1 s and
    exits; thread B, started later, takes A's slot. B's off-CPU time in a window that began
    while A owned the slot is B's own (at most its lifetime), not A's history plus B's."""
    from valkeytrace.tracers import ebpf_events
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.tracers.ebpf_window import MAX_SLOTS

    child = subprocess.Popen([sys.executable, "-c", CHURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tracer = EbpfTracer()
    try:
        tracer.pid, tracer.aof_dir = child.pid, str(tmp_path)
        tracer._load(tracer.plan(None, str(tmp_path)), None)
        tracer._events = ebpf_events.Events(tracer.bpf, tracer._defines)
        child.stdin.write("go\n")
        child.stdin.flush()
        line = child.stdout.readline().split()
        assert line[0] == "A" and int(line[1]) - child.pid >= MAX_SLOTS, line
        tid_a = int(line[1])
        tracer._poller = threading.Thread(target=tracer._poll, daemon=True)
        tracer._poller.start()  # refreshes slots when the tids change (a poll a second), as in a recording
        time.sleep(0.5)
        tracer.window_begin()
        slot_a = tracer._extra.get(tid_a)
        assert slot_a is not None and slot_a >= MAX_SLOTS
        line = child.stdout.readline().split()
        assert line[0] == "B", line
        tid_b, b_started = int(line[1]), float(line[2])
        deadline = time.monotonic() + 4
        while tracer._extra.get(tid_b) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the next poll sees a new tid and refreshes: B gets a slot
        assert tracer._extra.get(tid_b) == slot_a  # B took A's slot
        time.sleep(0.5)  # and sleeps on in it
        win = tracer.window_end()
        lifetime_ns = (time.monotonic() - b_started) * 1e9
    finally:
        stop_both(tracer, child)
    b = next(t for t in win["threads"] if t["tid"] == tid_b)
    off_b = sum(v for st in b["off_cpu_ns"].values() for v in st.values())
    # sleeping since it got the slot, and no more than it lived (A slept 2 s in the slot before it)
    assert 0.3e9 <= off_b <= lifetime_ns, (off_b, lifetime_ns)


OFFLOAD_SHAPE = """
import os, sys, threading, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
stop = threading.Event()
def syncer():  # another thread makes the writes durable, as #3381's offload does
    while not stop.is_set():
        os.fdatasync(fd)
        time.sleep(0.001)
sys.stdin.readline()  # the tracer is loaded
t = threading.Thread(target=syncer); t.start()
print("go", flush=True)
end = time.monotonic() + 2
while time.monotonic() < end:
    os.write(fd, b"x" * 100)  # the main thread appends, 2 ms apart
    time.sleep(0.002)
stop.set(); t.join()
print("done", flush=True)
sys.stdin.readline()
"""


def test_an_aof_write_ends_where_it_ends_when_another_thread_fsyncs(needs_bpf, tmp_path):
    """ext4 starts a journal handle after a write's last folio (the size update, once its page was written
    back): that start must not begin another write, or, with the fsyncs on another thread and no program on
    every switch (attached), the main thread's next write would run from there (2 ms apart here: every write
    ~2 ms, not its few us). Witness: the main thread's AOF writes' mean against the 2 ms between them."""
    aof = tmp_path / "appendonly.aof.1.incr.aof"
    child = subprocess.Popen([sys.executable, "-c", OFFLOAD_SHAPE, str(aof)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        tracer = attached_tracer(child.pid, tmp_path)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "go"
        tracer._refresh()  # the syncer thread and the AOF fd
        tracer.window_begin()
        assert child.stdout.readline().strip() == "done"
        win = tracer.window_end()
    finally:
        stop_both(tracer, child)
    writes = main_aof_writes(win, child.pid, tracer)
    assert writes["count"] >= 300, writes["count"]
    assert writes["sum_ns"] / writes["count"] < 500_000, writes["sum_ns"] / writes["count"]  # a phantom: ~2 ms
    syncs = next(t for t in win["threads"] if t["tid"] != child.pid)["calls"]["fdatasync"]
    assert syncs["count"] >= 300, syncs["count"]


BOUNDARY_WRITES = """
import os, sys, threading, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
stop = threading.Event()
def syncer():
    while not stop.is_set():
        os.fdatasync(fd)
        time.sleep(0.001)
t = threading.Thread(target=syncer); t.start()
print("ready", flush=True)
sys.stdin.readline()  # the window is open
n = nbytes = 0
for i in range(150):
    size = os.fstat(fd).st_size
    for chunk in (4096 - size % 4096, 4096, 10000, 100):  # to a page boundary, a whole page, three pages, a few bytes
        nbytes += os.write(fd, b"x" * chunk)
        n += 1
    time.sleep(0.002)
stop.set(); t.join()
print("done", n, nbytes, flush=True)
sys.stdin.readline()
"""


def test_every_aof_write_is_counted_once_with_its_bytes_where_it_ends_on_a_page_boundary(needs_bpf, tmp_path):
    """A write begun from its inode (its length not read) ends at the first folio the copy leaves short of a
    page boundary: writes that fill a page exactly, or span several, need the length from the registers.
    Witness: the writer's own count and bytes, against the probe's (attached: no program on every switch)."""
    aof = tmp_path / "appendonly.aof.1.incr.aof"
    child = subprocess.Popen([sys.executable, "-c", BOUNDARY_WRITES, str(aof)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        assert child.stdout.readline().strip() == "ready"
        tracer = attached_tracer(child.pid, tmp_path)
        tracer._refresh()
        tracer.window_begin()
        child.stdin.write("go\n")
        child.stdin.flush()
        done, n, nbytes = child.stdout.readline().split()
        assert done == "done"
        win = tracer.window_end()
    finally:
        stop_both(tracer, child)
    writes = main_aof_writes(win, child.pid, tracer)
    assert (writes["count"], writes["bytes"]) == (int(n), int(nbytes))
    assert writes["sum_ns"] / writes["count"] < 500_000, writes  # none runs on into the next (2 ms apart)
    assert win["lost_events"] == 0
