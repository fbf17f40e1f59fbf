"""The virtual offload's designs under faults (csrc/offload_main_write.c, offload_bio.c), in the real shim preloaded
into a small process that writes and fdatasyncs `appendonlydir/*.incr.aof` files as valkey does (its event loop an
epoll_wait). The files it writes are the independent truth of what reached them; the fault is real or injected:
a short write from the kernel (RLIMIT_FSIZE: the write stops at the limit, the next one fails with EFBIG), a
failed fdatasync (--inject-fsync-error's VALKEYTRACE_FSYNC_ERROR, counting the shim's real syncs)."""
import os
import subprocess
import sys

import pytest

from valkeytrace.tracers.emulation import shim_library
from valkeytrace.tracers.offload import OffloadStats

pytestmark = pytest.mark.integration

REC = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n"
FAILED, FAIL_WRITE, FAIL_FSYNC = 4, 1, 2  # csrc/offload_layout.h

# Writes REC to file 0 and fdatasyncs it (the job's sync starts: 200 ms, as every sync), then, while it runs, REC to files 1..N
# (each synced as `always` does): main-write postpones them and writes them in one turn after the sync. Then the
# event loop runs 3.5 s (the 10 syncs after: 2 s). A failed offload ends the process (exit 1) as valkey would; errors from the shim are expected.
MANY = r"""
import os, select, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d + "/appendonlydir", exist_ok=True)
fds = [os.open(f"{d}/appendonlydir/t.{i}.incr.aof", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) for i in range(n + 1)]
R = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n"
os.write(fds[0], R); os.fdatasync(fds[0])
time.sleep(0.03)
try:
    for fd in fds[1:]:
        os.write(fd, R); os.fdatasync(fd)
except OSError:
    pass
ep = select.epoll(); t = time.monotonic()
while time.monotonic() - t < 3.5:
    ep.poll(0.01)
os._exit(0)
"""

# Writes A and fdatasyncs it, then B, which crosses the file-size limit: the kernel writes part of B (a real short
# write) and fails the rest with EFBIG. Then the event loop runs 1 s (a failed offload ends the process).
SHORT = r"""
import os, resource, select, signal, sys, time
d = sys.argv[1]
os.makedirs(d + "/appendonlydir", exist_ok=True)
fd = os.open(d + "/appendonlydir/t.1.incr.aof", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
A = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n"
B = b"*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$3\r\n222\r\n"
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (len(A) + 10, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
os.write(fd, A); os.fdatasync(fd)
time.sleep(0.1)
try:
    os.write(fd, B); os.fdatasync(fd)
except OSError:
    pass
ep = select.epoll(); t = time.monotonic()
while time.monotonic() - t < 1:
    ep.poll(0.01)
os._exit(0)
"""


def _run(tmp_path, prog: str, args: list[str], design: str, env: dict):
    stats = OffloadStats("durable", design=design)
    try:
        res = subprocess.run([sys.executable, "-c", prog, str(tmp_path), *args],
                             env={**os.environ, "LD_PRELOAD": shim_library(), **stats.env(), **env},
                             capture_output=True, text=True, timeout=60)
        assert res.returncode in (0, 1), res.stderr[-2000:]
        snap = stats.snapshot()
        assert snap is not None
        return snap, res
    finally:
        stats.close()


def _sizes(tmp_path, n: int) -> list[int]:
    return [os.path.getsize(tmp_path / "appendonlydir" / f"t.{i}.incr.aof") for i in range(n)]


def test_main_write_syncs_every_file_written_between_two_jobs(tmp_path):
    """main-write, 10 files written while one sync runs (more than the 8 a job records): with no fault every
    byte is durable; each of the 10 files gets a real fdatasync of its own, so the injected error at the 11th
    sync (file 0's is the 1st) fails the offload and nothing written after file 0 is ever counted durable.
    Before the fix the 10th file was dropped from the job's list: 10 syncs only, the error never met, and
    durable covered its bytes though no sync had reached them."""
    n = 10
    ok, res = _run(tmp_path / "ok", MANY, [str(n)], "main-write", {"VALKEYTRACE_FSYNC_DELAY": "const:200000000"})
    assert _sizes(tmp_path / "ok", n + 1) == [len(REC)] * (n + 1)
    assert int(ok.state) != FAILED and int(ok.durable_bytes) == int(ok.queued_bytes) == len(REC) * (n + 1), res.stderr
    snap, res = _run(tmp_path / "e", MANY, [str(n)], "main-write",
                     {"VALKEYTRACE_FSYNC_DELAY": "const:200000000", "VALKEYTRACE_FSYNC_ERROR": f"eio@{n + 1}"})
    assert int(snap.state) == FAILED and int(snap.fail_kind) == FAIL_FSYNC, (int(snap.state), res.stderr[-500:])
    assert int(snap.durable_bytes) == len(REC), int(snap.durable_bytes)


def test_main_write_fails_when_its_own_sync_of_an_unrecorded_file_fails(tmp_path):
    """The sync the main thread makes itself (the 10th file, no slot left) fails: its return is not ignored,
    the offload fails as an fdatasync failure, and durable stays at file 0's bytes."""
    n = 10
    snap, res = _run(tmp_path, MANY, [str(n)], "main-write",
                     {"VALKEYTRACE_FSYNC_DELAY": "const:200000000", "VALKEYTRACE_FSYNC_ERROR": "eio@2"})
    assert int(snap.state) == FAILED and int(snap.fail_kind) == FAIL_FSYNC, (int(snap.state), res.stderr[-500:])
    assert int(snap.durable_bytes) == len(REC), int(snap.durable_bytes)


@pytest.mark.parametrize("design", ["main-write", "bio-write-block", "bio-write"])
def test_a_short_write_is_cut_off_the_aof(tmp_path, design):
    """A real short write (the kernel's file-size limit) under each design: the offload fails as a write
    failure, and the AOF holds A and nothing of B, as valkey cuts a short write off its AOF. Before the fix,
    main-write left B's first 10 bytes, a partial record, in the file."""
    snap, res = _run(tmp_path, SHORT, [], design, {})
    assert int(snap.state) == FAILED and int(snap.fail_kind) == FAIL_WRITE, (int(snap.state), res.stderr[-500:])
    assert (tmp_path / "appendonlydir" / "t.1.incr.aof").read_bytes() == REC
    assert int(snap.durable_bytes) == len(REC)
