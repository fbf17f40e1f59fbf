"""The virtual offload (record --emulate-offload), against independent truths: a real
valkey-server with the shim preloaded and a long injected fsync delay (80 ms), driven over raw
sockets. Under `durable` a SET is answered only after its batch's fdatasync (the reply waits the
delay) while a GET on another connection is answered during it (the main thread never waits),
and the SET is in the AOF file on disk when its reply arrives; under `early-ack` the SET is
answered at once and reaches the file later. Then a real recording: 0 early replies, the main
thread never fdatasyncs, the offload thread carries the delay; refusals in one line."""
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from valkeytrace.server.binaries import embedded_server
from valkeytrace.server.process import connect
from valkeytrace.tracers.emulation import shim_library
from valkeytrace.tracers.offload import OffloadStats
from vtcli import report_json, skip_unless_recorded, vt

pytestmark = pytest.mark.integration
DELAY_S = 0.08


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cmd(*args) -> bytes:
    return b"".join([f"*{len(args)}\r\n".encode()] + [f"${len(a)}\r\n{a}\r\n".encode() for a in args])


def _call(sock, *args) -> tuple[bytes, float]:
    t0 = time.monotonic()
    sock.sendall(_cmd(*args))
    data = b""
    while not data.endswith(b"\r\n"):
        data += sock.recv(4096)
    return data, time.monotonic() - t0


@pytest.fixture(params=["durable", "early-ack"])
def server(request):
    workdir = tempfile.mkdtemp(prefix="vt-offload-")
    stats = OffloadStats(request.param)
    port = _free_port()
    env = {**os.environ, "LD_PRELOAD": shim_library(), "VALKEYTRACE_FSYNC_DELAY": f"const:{int(DELAY_S * 1e9)}",
           **stats.env()}
    proc = subprocess.Popen([embedded_server(), "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
                             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--io-threads", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
            if _call(socks[0], "PING")[0] == b"+PONG\r\n":
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)
    stats.load_commands(connect("127.0.0.1", port))  # as record does, before any load
    yield request.param, socks, workdir, stats
    for s in socks:
        s.close()
    proc.terminate()
    proc.wait(timeout=15)
    stats.close()
    shutil.rmtree(workdir, ignore_errors=True)


def _aof_text(workdir) -> bytes:
    return b"".join(open(p, "rb").read() for p in glob.glob(os.path.join(workdir, "appendonlydir", "*.incr.aof")))


def test_replies_wait_for_durability_only_where_they_should(server):
    mode, (writer, reader), workdir, stats = server
    _call(writer, "SET", "warm", "x")  # the AOF file exists and the offload thread runs
    writer.sendall(_cmd("SET", "k1", "durable-value"))
    t0 = time.monotonic()
    time.sleep(0.01)  # the SET is executed and its batch handed to vt_offload
    got, get_s = _call(reader, "GET", "warm")
    assert got.startswith(b"$1") and get_s < DELAY_S / 2, f"a GET waited {get_s * 1000:.0f} ms for an fsync"
    data = b""
    while not data.endswith(b"\r\n"):
        data += writer.recv(4096)
    set_s = time.monotonic() - t0
    assert data == b"+OK\r\n"
    if mode == "durable":
        assert set_s >= DELAY_S * 0.95, f"the SET was answered {set_s * 1000:.0f} ms in, before its fdatasync"
        assert b"durable-value" in _aof_text(workdir), "the SET was acknowledged before it was in the file"
        snap = stats.snapshot()
        assert snap["held_replies"] >= 1 and snap["early_replies"] == 0 and snap["jobs"] >= 1
    else:
        assert set_s < DELAY_S / 2, f"early-ack held the SET {set_s * 1000:.0f} ms"
        deadline = time.monotonic() + 2
        while b"durable-value" not in _aof_text(workdir) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert b"durable-value" in _aof_text(workdir), "the offload thread never wrote the SET"
        assert stats.snapshot()["held_replies"] == 0


def test_a_recording_with_the_durable_virtual_offload(tmp_path):
    out = tmp_path / "voff.vtrace"
    res = vt("record", "--workload", "write-only", "--sizes", "64", "--duration", "1.5", "--repeat", "1",
             "--io-threads", "1", "--appendfsync", "always", "--inject-fsync-delay", "4ms", "--backend", "ebpf",
             "--emulate-offload", "durable", "-o", out, timeout=300)
    skip_unless_recorded(res)
    d = report_json(out)
    run = d["runs"][0]
    off = run["emulation"]["offload"]
    assert off["mode"] == "durable" and off["early_replies"] == 0 and off["held_replies"] > 100
    assert off["released_replies"] + off["dropped_replies"] <= off["held_replies"]
    assert off["jobs_waited_mean"] >= 1 and off["job_ms_p50"] >= 4.0  # each job carries the injected 4 ms
    assert "virtual offload (emulated #3381)" in run["emulation"]["description"]
    cell = run["cells"][0]
    srv = cell["server"]
    assert srv["main_thread"]["fdatasync_count"] == 0, "the main thread still fdatasyncs"
    (vo,) = [t for t in srv["threads"] if t["role"] == "vt_offload"]
    assert vo["fdatasync"]["count"] > 50 and vo["fdatasync"]["p50_us"] >= 4000
    p50_ms = cell["ops"]["SET"]["p50_us"] / 1000
    assert abs(p50_ms - off["jobs_waited_mean"] * off["job_ms_mean"]) <= 0.25 * p50_ms
    (e,) = [x for x in run["explanation"] if x["op"] == "SET"]
    jobs = next(n for n in e["notes"] if n["code"] == "durability.offload_jobs")["figures"]
    assert jobs["thread"] == "vt_offload" and abs(jobs["jobs_waited"] - off["jobs_waited_mean"]) <= 0.05, (jobs, off)
    assert [p["role"] for p in e["evidence"]["fsync_by_role"]] == ["vt_offload"], e["evidence"]["fsync_by_role"]


def test_refused_where_it_cannot_apply(tmp_path):
    for extra in (["--appendfsync", "everysec"], ["--attach", str(os.getpid())]):
        res = vt("record", "--workload", "write-only", "--emulate-offload", "durable", *extra, "-o", tmp_path / "x.vtrace")
        assert res.returncode == 2 and "--emulate-offload" in res.stderr, res.stderr
        assert len([x for x in res.stderr.splitlines() if x.strip()]) == 1 and "Traceback" not in res.stderr
