"""record --offload-design and --inject-fsync-delay ...,blocks-writes in the real shim (csrc/offload_design.h
and its designs; csrc/shim_stall.c), preloaded into a small process that writes and fdatasyncs an
`appendonlydir/*.incr.aof` file as valkey does (its event loop an epoll_wait): the file it writes is the
independent truth of when bytes reach it, the injected delay the truth of how long a sync runs. Then one real
server under main-write and a power cut: the contract (0 acknowledged writes lost) with the main thread writing."""
import json
import os
import subprocess
import sys

import pytest
from vtcli import vt

from valkeytrace.recording.format import read
from valkeytrace.tracers.emulation import shim_library
from valkeytrace.tracers.offload import OffloadStats

pytestmark = pytest.mark.integration

# The process: write A and fdatasync it (a sync starts), then write B (and sync it) a moment later; the event loop (an
# epoll_wait of 10 ms) runs until B is in the file. Prints what it saw: B's write() call, the file's size right
# after it, and the loop's turns (their length, and the file's size after each).
PROG = r"""
import json, os, select, sys, threading, time
d = sys.argv[1]
os.makedirs(d + "/appendonlydir", exist_ok=True)
fd = os.open(d + "/appendonlydir/t.1.incr.aof", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
A = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n"
B = b"*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$1\r\n2\r\n"
if sys.argv[2] == "thread":  # no offload: the sync on a thread of its own, as a bio thread would
    os.write(fd, A)
    threading.Thread(target=os.fdatasync, args=(fd,)).start()
else:
    os.write(fd, A); os.fdatasync(fd)
time.sleep(0.1)
t0 = time.monotonic(); os.write(fd, B); t1 = time.monotonic()
out = {"write_s": t1 - t0, "size_after_write": os.fstat(fd).st_size, "a": len(A), "b": len(B), "turns": []}
if sys.argv[2] != "thread":
    os.fdatasync(fd)  # as valkey's always: its write, then its sync
ep = select.epoll()
while os.fstat(fd).st_size < len(A) + len(B) and time.monotonic() - t1 < 5:
    s = time.monotonic(); ep.poll(0.01)
    out["turns"].append([s - t1, time.monotonic() - s, os.fstat(fd).st_size])
print(json.dumps(out), flush=True)
os._exit(0)  # no drain at exit: the test has what it needs
"""


def _run(tmp_path, delay: str, design: str | None):
    stats = OffloadStats("durable", design=design) if design else None
    env = {**os.environ, "LD_PRELOAD": shim_library(), "VALKEYTRACE_FSYNC_DELAY": delay,
           **(stats.env() if stats else {})}
    try:
        res = subprocess.run([sys.executable, "-c", PROG, str(tmp_path), "offload" if design else "thread"],
                             env=env, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr[-2000:]
        snap = stats.snapshot() if stats else None
        return json.loads(res.stdout), snap
    finally:
        if stats:
            stats.close()


@pytest.mark.timed
def test_blocks_writes_holds_a_write_while_its_file_syncs(tmp_path):
    """A write to a file whose emulated sync runs waits for the sync's end with ,blocks-writes, and not without."""
    blocked, _ = _run(tmp_path / "b", "const:600000000;blocks-writes", None)
    assert blocked["write_s"] >= 0.35, blocked  # the sync: 600 ms from ~0 ms; the write came at +100 ms
    free, _ = _run(tmp_path / "f", "const:600000000", None)
    assert free["write_s"] < 0.3, free


@pytest.mark.timed
def test_bio_write_block_hand_off_waits_for_the_running_job(tmp_path):
    """bio-write-block: the main thread's write of B (its hand-off) returns only once the job carrying A has
    synced (600 ms), and is counted; bio-write takes B at once (the job collapses it into the next)."""
    out, snap = _run(tmp_path / "k", "const:600000000", "bio-write-block")
    assert out["write_s"] >= 0.35, out
    assert int(snap.handoff_waits) == 1 and int(snap.handoff_wait_ns) >= 350_000_000, snap
    assert int(snap.design) == 1
    out, snap = _run(tmp_path / "w", "const:600000000", "bio-write")
    assert out["write_s"] < 0.3 and int(snap.handoff_waits) == 0, out


@pytest.mark.timed
def test_main_write_postpones_up_to_2s_then_writes_whatever_the_disk_does(tmp_path):
    """main-write, a sync of 2.6 s that blocks writes: A is in the file at once (the main thread wrote it); B,
    due while the sync runs, is postponed (not in the file), then written by the main thread's loop at the 2 s
    limit, that turn blocked in write() until the sync ends (2.6 s): postponed, forced, its postponement ~2 s."""
    out, snap = _run(tmp_path, "const:2600000000;blocks-writes", "main-write")
    assert out["size_after_write"] == out["a"], out  # A written by the main thread; B kept in memory
    grew = [t for t in out["turns"] if t[2] >= out["a"] + out["b"]]
    assert grew, out
    start, took, _ = grew[0]
    assert 1.9 <= start <= 2.3 and took >= 0.2, grew[0]  # the loop's turn at 2 s, blocked until the sync's end
    assert int(snap.postponed_writes) >= 1 and int(snap.forced_writes) == 1, snap
    assert 1.9e9 <= int(snap.postpone_ns.max_ns) <= 2.3e9, int(snap.postpone_ns.max_ns)
    assert int(snap.main_write_ns.max_ns) >= 0.2e9  # that write, as the shim timed it: the wait included
    assert int(snap.design) == 2


@pytest.fixture(scope="module")
def main_write_cut(tmp_path_factory):
    out = tmp_path_factory.mktemp("designs") / "mw.vtrace"
    res = vt("record", "--workload", "write-only", "--sizes", "64", "--duration", "2", "--repeat", "1",
             "--io-threads", "1", "--keyspace", "20000", "--rate", "3000", "--inject-fsync-delay", "2ms",
             "--no-demand-pass", "--emulate-offload", "durable", "--offload-design", "main-write",
             "--verify-durability", "power-cut", "-o", out, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return read(out)


def test_main_write_keeps_the_contract_at_a_power_cut(main_write_cut):
    """A real server under main-write: the design is recorded, the main thread made AOF writes (as stock valkey),
    and a power cut loses none of the writes the clients saw acknowledged."""
    doc = main_write_cut
    assert doc["emulation"]["offload"]["design"] == "main-write"
    run = doc["runs"][0]
    dc = run["durability_check"]
    assert dc["method"] == "power-cut" and dc["acked"] > 0 and dc["acked_missing"] == 0, {k: dc.get(k) for k in
                                                                                         ("acked", "acked_missing")}
    assert run["offload"]["early_replies"] == 0


def test_predict_another_design_from_a_recording(main_write_cut, tmp_path):
    """predict --offload-design from the main-write recording: the model calibrated on it, run as bio-write-block
    (its figures with their ranges, as any prediction); refused in one line on a recording without the offload."""
    rec = tmp_path / "mw.vtrace"
    from valkeytrace.recording.format import write
    write(rec, main_write_cut)
    res = vt("predict", rec, "--offload-design", "bio-write-block", "--format", "json", timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert "bio-write-block" in json.dumps(out) and out["cells"], str(out)[:500]
    res = vt("predict", rec, "--offload-design", "main-write", "--emulate-offload", "none", timeout=60)
    assert res.returncode != 0 and "--emulate-offload durable" in res.stderr and "Traceback" not in res.stderr
