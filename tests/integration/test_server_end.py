"""A server that ends, stalls or is shut down under valkeytrace, with real faults (signals, a failing
fdatasync, a client that never reads) and witnesses that can fail: the moment the test itself made the
fault, the AOF a plain server reloads, the server's exit status and its own log.

- the recording says how and when the server ended, cuts the window there, and record exits non-zero;
  the report says it first and reads no dead thread as waiting for a CPU;
- a stopped or sleeping main thread is a stall, said with its length;
- under the durable virtual offload: SIGTERM drains on the server's own shutdown path, a second SIGINT
  (valkey's exit() inside its handler) neither hangs nor loses an acknowledged write, SIGKILL during an
  AOF rewrite loses none, a failed fdatasync ends the server as valkey ends it, and a client that never
  reads is closed at its client-output-buffer-limit instead of growing the server."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from test_offload_contract import Conn, aof_bytes, launch
from valkeytrace.recording import format as recfmt
from valkeytrace.server.process import EmbeddedServer
from valkeytrace.tracers import offload as voff
from vtcli import VT, probes_loaded, report_json, vt

pytestmark = pytest.mark.integration


def _server_of(port: int, timeout: float = 20.0) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                return psutil.Process(c.pid)
        time.sleep(0.1)
    raise AssertionError(f"no server listening on {port}")


def _record_observing(out, port, seconds, *extra):
    return subprocess.Popen([VT, "record", "--workload", "none",
                             "--duration", str(seconds), "--repeat", "1", "--port", str(port), "--backend", "ebpf",
                             "-o", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_server_killed_under_record_is_said_first_and_its_window_ends_there(tmp_path, needs_bpf):
    out, port = tmp_path / "k.vtrace", 7481
    rec = _record_observing(out, port, 20)
    server = _server_of(port)
    probes_loaded(rec.pid)  # the window opens right after (under a loaded CI, 4 s after the server was not enough)
    time.sleep(1.5)
    killed_at = time.time()
    server.send_signal(signal.SIGKILL)
    _, err = rec.communicate(timeout=60)
    assert rec.returncode == 1, err
    lines = [x for x in err.splitlines() if x.startswith("valkeytrace:")]
    assert len(lines) == 1 and "killed by SIGKILL" in lines[0], err
    doc = recfmt.read(out)
    run = doc["runs"][0]
    e = run["server_exit"]
    assert e["signal"] == "SIGKILL" and e["in_window"]
    # the window closes where the kill happened (the test's own clock), not 20 s later
    assert abs(run["window_start"] + e["at_s"] - killed_at) < 0.3, (e, killed_at - run["window_start"])
    assert abs(run["server"]["window_ns"] / 1e9 - e["at_s"]) < 0.3
    assert doc["complete"] is False
    rep = vt("report", str(out))
    assert rep.returncode == 0 and "THE SERVER ENDED" in rep.stdout.splitlines()[0] and "SIGKILL" in rep.stdout
    main = report_json(out)["runs"][0]["cells"][0]["server"]["main_thread"]
    # the dead thread is not read as waiting for a CPU (it was, up to the window's end, before)
    assert main["waiting_for_cpu_pct"] < 5.0, main
    assert report_json(out)["runs"][0]["server_exits"][0]["signal"] == "SIGKILL"


@pytest.mark.timed
def test_a_stopped_or_sleeping_server_is_a_stall_not_a_wait_for_a_cpu(tmp_path, needs_bpf):
    out, port = tmp_path / "s.vtrace", 7482
    rec = _record_observing(out, port, 8, "--server-config", "enable-debug-command=yes")
    server = _server_of(port)
    # the window opens once the probes are in (a fixed 2 s once missed the SIGSTOP in CI: 1 stall of 2)
    probes_loaded(rec.pid)
    server.send_signal(signal.SIGSTOP)
    time.sleep(0.8)
    server.send_signal(signal.SIGCONT)
    time.sleep(0.5)
    a = Conn(port)
    assert a.timed("DEBUG", "SLEEP", "0.5")[0] == b"+OK"
    _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    doc = report_json(out)
    warns = [w["figures"] for w in doc["runs"][0]["warnings"] if w["code"] == "stall"]
    assert warns and warns[0]["intervals"] == 2, doc["runs"][0]["warnings"]
    assert 700 <= warns[0]["longest_ms"] <= 1500, warns  # SIGSTOP for 0.8 s (the test's own clock)
    main = doc["runs"][0]["cells"][0]["server"]["main_thread"]
    assert main["waiting_for_cpu_pct"] < 5.0 and main["other_blocked_pct"] > 15.0, main


def _writers(port, n, stop, acked):
    def run(i):
        a = Conn(port)
        try:
            for j in range(1_000_000):
                if stop.is_set():
                    return
                if a.timed("SET", f"w{i}:{j:06d}", "v" * 32)[0] == b"+OK":
                    acked.append(f"w{i}:{j:06d}".encode())
        except (ConnectionError, OSError):
            pass
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def _missing_after_reload(workdir, acked) -> int:
    """A plain server (no shim) loads the AOF: how many acknowledged keys are not there."""
    plain = EmbeddedServer(io_threads=1, server_config={"dir": workdir}, keep_dir=True)
    try:
        c = plain.client()
        missing = 0
        for i in range(0, len(acked), 500):
            got = c.execute_command("EXISTS", *acked[i:i + 500])
            missing += len(acked[i:i + 500]) - int(got)
        return missing
    finally:
        plain.stop()


def test_a_second_sigint_exits_without_hanging_or_losing_an_acknowledged_write():
    """valkey's second SIGINT calls exit() inside its handler: the emulation takes no lock there (it
    would deadlock against the main thread it interrupted); nothing it acknowledged was only queued."""
    target, stats = launch("durable", delay_ms=5)
    acked, stop = [], threading.Event()
    threads = _writers(target.port, 6, stop, acked)
    time.sleep(1.0)
    target.proc.send_signal(signal.SIGINT)
    target.proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    code = target.proc.wait(timeout=30)
    took = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(5)
    at_exit = stats.at_exit()
    workdir = target.workdir
    target._own_workdir = False
    target.stop()
    stats.close()
    try:
        assert took < 10 and len(acked) > 50, (took, len(acked))
        assert at_exit["signals"] >= 1 and at_exit["last_signal"] == "SIGINT", at_exit
        assert _missing_after_reload(workdir, acked) == 0
    finally:
        subprocess.run(["rm", "-rf", workdir])


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_signal_during_an_aof_rewrite_keeps_every_acknowledged_key(sig):
    target, stats = launch("durable", delay_ms=5)
    acked, stop = [], threading.Event()
    threads = _writers(target.port, 4, stop, acked)
    time.sleep(0.8)
    assert Conn(target.port).timed("BGREWRITEAOF")[0].startswith(b"+")
    time.sleep(0.3)
    target.proc.send_signal(sig)
    target.proc.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join(5)
    workdir = target.workdir
    target._own_workdir = False
    target.stop()
    stats.close()
    try:
        assert len(acked) > 50
        assert _missing_after_reload(workdir, acked) == 0
    finally:
        subprocess.run(["rm", "-rf", workdir])


@pytest.mark.parametrize("offload", [None, "durable"])
def test_a_failed_fdatasync_ends_the_server_as_valkey_does(tmp_path, offload, needs_bpf):
    """--inject-fsync-error eio@N through record: under appendfsync always valkey logs that it cannot
    persist the AOF and exits 1; under the durable virtual offload the server ends the same way, and
    nothing acknowledged is missing from the AOF."""
    out, port = tmp_path / "e.vtrace", 7483 if offload else 7484
    extra = ["--inject-fsync-delay", "2ms", "--inject-fsync-error", "eio@200"] + (["--emulate-offload", offload]
                                                                                  if offload else [])
    rec = _record_observing(out, port, 30, "--server-config", f"dir={tmp_path}", *extra)
    _server_of(port)
    probes_loaded(rec.pid)
    acked, stop = [], threading.Event()
    threads = _writers(port, 4, stop, acked)
    _, err = rec.communicate(timeout=90)
    stop.set()
    for t in threads:
        t.join(5)
    assert rec.returncode == 1 and "exited with status 1" in err, err
    e = recfmt.read(out)["runs"][0]["server_exit"]
    assert e["status"] == 1 and "Can't persist AOF" in (e.get("cause") or ""), e
    data = b"".join(open(p, "rb").read() for p in (tmp_path / "appendonlydir").glob("*"))
    assert acked and all(k in data for k in acked), f"{sum(k not in data for k in acked)} of {len(acked)} missing"


def test_a_client_that_never_reads_is_closed_at_its_output_buffer_limit():
    target, stats = launch("durable", delay_ms=2, config={"client-output-buffer-limit": "normal 4mb 2mb 2"})
    try:
        s = Conn(target.port).s
        s.setblocking(False)
        payload = b"".join(b"*3\r\n$3\r\nSET\r\n$6\r\ns%05d\r\n$64\r\n%s\r\n" % (i, b"v" * 64) for i in range(1000))
        closed, off, t0 = False, 0, time.monotonic()
        while time.monotonic() - t0 < 30 and not closed:
            try:
                off = (off + s.send(payload[off:])) % len(payload)
            except BlockingIOError:
                time.sleep(0.005)
            except OSError:
                closed = True
        rss_mb = psutil.Process(target.pid).memory_info().rss / 2**20
        counters = stats.snapshot()
        assert closed, "the client was never closed"
        assert counters["obuf_closed"] == 1 and rss_mb < 200, (int(counters["obuf_closed"]), rss_mb)
        deadline = time.monotonic() + 5  # the server's output is read by a thread: give it time to arrive
        while "over its client-output-buffer-limit" not in " ".join(target._log) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "over its client-output-buffer-limit" in " ".join(target._log), list(target._log)[-5:]
        assert Conn(target.port).timed("PING")[0] == b"+PONG"  # the server goes on
    finally:
        target.stop()
        stats.close()


def _valkey_children(pid: int) -> list:
    """The valkey-servers a process started, those that ended while being listed left out."""
    out = []
    for c in psutil.Process(pid).children(recursive=True):
        try:
            if c.name() == "valkey-server":
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def test_a_server_killed_under_compare_is_said(tmp_path, needs_bpf):
    out = tmp_path / "c"
    cmp = subprocess.Popen([VT, "compare", "--launches", "1", "--workload", "write-only", "--sizes", "64",
                            "--duration", "1", "--repeat", "2", "--keyspace", "1000", "--write-clients", "10",
                            "--backend", "ebpf", "--candidate-config", "appendfsync=everysec", "--no-whatif", "-o", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 90
    while killed is None and time.monotonic() < deadline and cmp.poll() is None:
        # the launches run in the compare's process, one server at a time: the candidate's, once its
        # first repeat is measured, is killed in the second
        servers = _valkey_children(cmp.pid)
        partial = out / ".launches" / "candidate-1.vtrace.partial"
        try:
            measured = partial.exists() and any(r["status"] == "ok" for r in recfmt.read(partial)["runs"])
        except Exception:
            measured = False
        if servers and measured:
            time.sleep(0.5)
            servers[0].send_signal(signal.SIGKILL)
            killed = servers[0].pid
            break
        time.sleep(0.2)
    _, err = cmp.communicate(timeout=120)
    assert killed, err
    assert "warning: candidate launch 1 failed" in err and "killed by SIGKILL" in err, err
    doc = recfmt.read(out / "candidate.vtrace")
    assert [r["server_exit"]["signal"] for r in doc["runs"] if r.get("server_exit")] == ["SIGKILL"]
    rep = vt("report", "--compare", str(out / "baseline.vtrace"), str(out / "candidate.vtrace"), "--no-whatif")
    assert "THE SERVER ENDED" in rep.stdout.splitlines()[0], rep.stdout[:500]
    assert json.loads(vt("report", "--compare", str(out / "baseline.vtrace"), str(out / "candidate.vtrace"), "--no-whatif",
                         "--format", "json").stdout)["runs"][1]["server_exits"]
