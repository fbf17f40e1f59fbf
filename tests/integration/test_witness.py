"""--verify-durability's witness against faults made for it, on real servers and the real open-loop client
(issue 71, 1-4), each against a truth the witness does not compute:

- a server killed mid-window while its acknowledged writes wait unwritten (the early-ack offload behind a
  disk stall): the failed run's acknowledged writes are checked, and the missing ones reported;
- a wall clock stepped back an hour between two runs (in the second run's client only, by an interposed
  clock_gettime): no acknowledged write is reported missing that the reload holds;
- a reload slower than the load timeout: nothing compared, said so, nothing left running;
- a server with its own appendfilename: its AOF found and reloaded, nothing reported missing.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from valkeytrace.recording import format as recfmt
from valkeytrace.server import process as srv
from valkeytrace.server.binaries import embedded_server
from valkeytrace.workload import durability_check as dc
from vtcli import VT, must_have, tagged, vt

pytestmark = pytest.mark.integration

QUICK = ["--workload", "write-only", "--sizes", "64", "--no-demand-pass", "--verify-durability"]


def _openloop_client(port: int, timeout_s: float = 60.0) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if "valkeytrace.workload.openloop" in cmd and str(port) in cmd and "--acked-file" in cmd:
                return p
        time.sleep(0.05)
    raise AssertionError(f"no open-loop client on port {port} within {timeout_s} s")


def _partial_server(partial: Path, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            doc = recfmt.read(partial)
            if doc.get("server", {}).get("pid"):
                return doc["server"]
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError("the recording never named its server")


def _sets_run(port: int, n: int, timeout_s: float = 60.0) -> int:
    """Wait until the server has run n SETs (INFO commandstats): how many it had."""
    client = srv.connect("127.0.0.1", port, timeout=5.0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        calls = int((client.info("commandstats").get("cmdstat_set") or {}).get("calls", 0))
        if calls >= n:
            return calls
        time.sleep(0.02)
    raise AssertionError(f"the server ran fewer than {n} SETs in {timeout_s} s")


def test_a_run_that_fails_mid_window_has_its_acknowledged_writes_checked(tmp_path):
    """early-ack answers each SET before its AOF write; the disk stalls from 1 s after the server's start for
    60 s (the offload thread's first sync then: what it queues after is never written). The server is killed
    once it has run 4,500 SETs (1.5 s of them): its run fails, and what the clients saw acknowledged in it is checked against the
    reload: writes are missing (the truth: nothing acknowledged in the stall reached the file). The run's
    acknowledged writes once stayed in its client (it raised before writing them) and the check said
    "none of 0 acknowledged keys missing"."""
    out = tmp_path / "killed.vtrace"
    proc = subprocess.Popen([VT, "record", *QUICK, "--io-threads", "1", "--duration", "6", "--repeat", "1", "--keyspace", "3000",
                             "--rate", "3000", "--connections", "grow", "--backend", "shim",
                             "--emulate-offload", "early-ack", "--inject-fsync-delay", "1ms,stall:60s/1s", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server = _partial_server(Path(str(out) + ".partial"))
        _openloop_client(server["port"])
        sets = _sets_run(server["port"], 4500)  # 1.5 s of SETs (the client's start varies: counted, not timed)
        os.kill(server["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = recfmt.read(out)["runs"][0]
    assert proc.returncode == 1 and run["status"] == "failed", (proc.returncode, run["status"], err[-2000:])
    check = run["durability_check"]
    assert "error" not in check, check
    assert check["acked"] > 500 and check["acked_missing"] > 0, check
    # what the client read acknowledged of the SETs the server ran by the kill (a few replies die with it)
    assert [(r["run"], 0.5 * sets <= r["writes_acked"] <= sets + 3000, r["keys"] == check["acked"])
            for r in check["runs"]] == [(0, True, True)], (sets, check["runs"])
    assert "unread" not in check["runs"][0], check["runs"]


STEP_BACK = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_REALTIME an hour back in the processes whose command line holds $VT_TEST_STEP_MATCH (each one
 * marked by a line in $VT_TEST_STEP_MARK) */
static int stepped;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

__attribute__((constructor)) static void init(void)
{
    real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    const char *match = getenv("VT_TEST_STEP_MATCH"), *mark = getenv("VT_TEST_STEP_MARK");
    char cmd[16384];
    int fd = open("/proc/self/cmdline", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, cmd, sizeof(cmd)) : -1;
    if (fd >= 0)
        close(fd);
    if (!match || n <= 0 || !memmem(cmd, (size_t)n, match, strlen(match)))
        return;
    stepped = 1;
    int m = mark ? open(mark, O_WRONLY | O_APPEND | O_CREAT, 0644) : -1;
    if (m >= 0 && write(m, "stepped\n", 8) == 8)
        close(m);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (!real_clock_gettime) /* called before the constructor (another library's) */
        real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    int r = real_clock_gettime(id, ts);
    if (r == 0 && stepped && id == CLOCK_REALTIME)
        ts->tv_sec -= 3600;
    return r;
}
"""


def test_a_clock_step_between_runs_reports_nothing_the_reload_holds(tmp_path):
    """Two runs over 300 keys (each key written ~15 times in each); the second run's client sees the wall
    clock an hour back (an NTP step between the runs). Every key's last value is the second run's, and the
    reload holds it: nothing is missing. The sequences once came from the wall clock: the second run's were
    an hour below the first's, the first's kept as the floor, and every key was reported missing."""
    if subprocess.run(["which", "gcc"], capture_output=True).returncode:
        must_have("gcc (make setup installs it)")
    shared = Path(tempfile.mkdtemp(prefix="vt-step-back-"))  # preloaded by every process, the benchmark's user's too
    try:
        shared.chmod(0o755)
        lib = shared / "step_back.so"
        (tmp_path / "step_back.c").write_text(STEP_BACK)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(tmp_path / "step_back.c"), "-ldl"],
                       check=True)
        out, mark = tmp_path / "step.vtrace", tmp_path / "stepped"
        env = {**os.environ, "LD_PRELOAD": str(lib), "VT_TEST_STEP_MATCH": "run-2.u64", "VT_TEST_STEP_MARK": str(mark)}
        res = vt("record", *QUICK, "--io-threads", "1", "--duration", "1.5", "--repeat", "2", "--keyspace", "300",
                 "--rate", "3000", "--backend", "none", "-o", out, env=env, timeout=240)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert mark.read_text() == "stepped\n"  # the second run's client, alone, saw the step
    runs = recfmt.read(out)["runs"]
    check = runs[-1]["durability_check"]
    assert check["acked"] == 300 and check["acked_missing"] == 0 and "error" not in check, check
    assert [r["run"] for r in check["runs"]] == [0, 1] and all(r["writes_acked"] > 2000 for r in check["runs"]), check


class _SlowLoad(srv.EmbeddedServer):
    """The reload server, loading 200 µs a key (valkey's key-load-delay): 8,000 keys take 1.6 s."""
    started: list = []

    def __init__(self, *a, server_config=None, **kw):
        type(self).started.append(self)
        super().__init__(*a, server_config={**(server_config or {}), "key-load-delay": "200"}, **kw)


def _written_and_killed(keys: int, **config) -> tuple[srv.EmbeddedServer, dc.AckedWrites]:
    """A plain server given `keys` SETs by the test, each value a sequence the test chose and kept as the
    key's floor; then SIGKILLed (its AOF written before each reply: appendfsync always)."""
    server = srv.EmbeddedServer(appendfsync="always", io_threads=1, server_config=config)
    acked = dc.AckedWrites(keys)
    seqs = np.arange(1, keys + 1, dtype=np.uint64) * 1000 + 7
    client = srv.connect(server.host, server.port or 0)
    pipe = client.pipeline(transaction=False)
    for k in range(keys):
        pipe.set(f"key:{k:012d}", b"%016x" % int(seqs[k]) + b"x" * 16)
    pipe.execute()
    acked.latest[:] = seqs
    os.kill(server.pid or 0, signal.SIGKILL)
    server.proc.wait(10)
    return server, acked


def test_a_reload_slower_than_the_load_timeout_compares_nothing(tmp_path, monkeypatch):
    """The reload still loading at the timeout: an error that says so, no key compared (a reload cut short
    would hold few keys: every other one reported missing), and no server left running."""
    server, acked = _written_and_killed(8000)
    monkeypatch.setattr(dc, "LOAD_TIMEOUT_S", 0.3)
    monkeypatch.setattr(srv, "EmbeddedServer", _SlowLoad)
    try:
        check = dc.verify(server.binary, server.workdir, {}, acked)
    finally:
        server.stop()
        acked.close()
    assert "still loading" in check.get("error", "") and check["acked"] == 0 and check["acked_missing"] == 0, check
    assert _SlowLoad.started and all(s.proc is None or s.proc.poll() is not None for s in _SlowLoad.started)
    # the same AOF within the timeout: every key compared, none missing (the delay does not lose keys)
    server, acked = _written_and_killed(8000)
    monkeypatch.setattr(dc, "LOAD_TIMEOUT_S", 30.0)
    try:
        check = dc.verify(server.binary, server.workdir, {}, acked)
    finally:
        server.stop()
        acked.close()
    assert check["acked"] == 8000 and check["acked_missing"] == 0 and "error" not in check, check


def test_a_custom_appendfilename_is_reloaded(tmp_path):
    """A SERVER_COMMAND with --appendfilename custom.aof: the reload finds custom.aof.manifest and holds every
    acknowledged write. Without it the reload server looked for appendonly.aof.manifest, loaded nothing,
    and reported every acknowledged key missing."""
    d = tmp_path / "data"
    d.mkdir()
    out = tmp_path / "custom.vtrace"
    res = vt("record", *QUICK, "--duration", "1.5", "--repeat", "1", "--keyspace", "2000", "--rate", "3000",
             "--backend", "none", "-o", out, "--", embedded_server(), "--port", str(srv.free_port()), "--bind",
             "127.0.0.1", "--dir", str(d), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--appendfilename", "custom.aof", timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (d / "appendonlydir" / "custom.aof.manifest").exists()
    check = recfmt.read(out)["runs"][-1]["durability_check"]
    assert check["acked"] > 1000 and check["acked_missing"] == 0 and "error" not in check, check
    assert "appendfilename" in check["how"]
    assert not tagged(res.tag)  # the server and the reload both ended


def test_a_run_whose_client_was_killed_claims_nothing(tmp_path):
    """The first run's open-loop client SIGKILLed mid-window: what it saw acknowledged is lost with it, so the
    check cannot say nothing was lost: it says which run it could not read, and claims nothing (the second
    run's keys are still compared). Its file once was skipped without a word: "none of N missing"."""
    out = tmp_path / "client.vtrace"
    proc = subprocess.Popen([VT, "record", *QUICK, "--io-threads", "1", "--duration", "2", "--repeat", "2",
                             "--keyspace", "1000", "--rate", "2000", "--backend", "none", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server = _partial_server(Path(str(out) + ".partial"))
        client = _openloop_client(server["port"])
        time.sleep(0.3 + 0.8)
        client.kill()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    runs = recfmt.read(out)["runs"]
    assert [r["status"] for r in runs] == ["failed", "ok"], ([r["status"] for r in runs], err[-2000:])
    check = runs[-1]["durability_check"]
    assert "runs[0]" in check.get("error", "") and "nothing is claimed" in check["error"], check
    assert check["runs"][0]["unread"] and "unread" not in check["runs"][1], check["runs"]
    assert check["acked"] > 500 and check["acked_missing"] == 0, check  # the second run's, compared all the same
    assert "could not run" in err or "could not be read" in err, err[-2000:]
