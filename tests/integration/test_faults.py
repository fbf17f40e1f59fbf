"""Bad input, faults and interruption: one-line errors with the right status, nothing lost,
nothing left behind (no server, client, uprobe or BPF program)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from valkeytrace.recording import format as recfmt
from valkeytrace.workload.benchmark import ENDLESS_REQUESTS
from vtcli import VT, vt

pytestmark = pytest.mark.integration
GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden-v1-ebpf-everysec.vtrace"
QUICK = ["--sizes", "64", "--repeat", "1", "--duration", "1", "--keyspace", "500", "--backend", "none"]



def assert_one_line_error(res, status):
    assert res.returncode == status, (res.returncode, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("valkeytrace: error:"), res.stderr
    assert "Traceback" not in res.stderr


# -- bad recordings -----------------------------------------------------------------------------
def _bad_recordings(tmp: Path) -> dict:
    good = GOLDEN.read_bytes()
    files = {"empty": b"", "truncated": good[: len(good) // 2], "corrupt": good[:40] + b"\x00" * 50 + good[90:],
             "wrong_magic": b"NOTATRACE\n" + good[12:], "newer": b"VALKEYTRACE\nformat 7\n" + good[21:],
             "json": json.dumps({"format": "valkeytrace-report", "runs": []}).encode()}
    out = {}
    for name, data in files.items():
        p = tmp / f"{name}.vtrace"
        p.write_bytes(data)
        out[name] = p
    unreadable = tmp / "unreadable.vtrace"
    unreadable.write_bytes(good)
    unreadable.chmod(0)
    out["unreadable"] = unreadable
    out["missing"] = tmp / "missing.vtrace"
    out["directory"] = tmp
    return out


@pytest.mark.parametrize("case", ["empty", "truncated", "corrupt", "wrong_magic", "newer", "json", "missing",
                                  "directory"])
def test_bad_recording_is_one_line_exit_1(tmp_path, case):
    path = _bad_recordings(tmp_path)[case]
    res = vt("report", str(path))
    assert_one_line_error(res, 1)
    hint = {"empty": "empty", "truncated": "truncated", "corrupt": "corrupt", "wrong_magic": "not a valkeytrace",
            "newer": "newer", "json": "JSON file", "missing": "no such file", "directory": "directory",
            "unreadable": "permission denied"}[case]
    assert hint in res.stderr


def test_unreadable_recording(tmp_path, as_nobody):
    # root reads anything: check it as an unprivileged user
    path = _bad_recordings(tmp_path)["unreadable"]
    os.chmod(tmp_path, 0o755)
    res = subprocess.run(["runuser", "-u", "nobody", "--", VT, "report", str(path)], capture_output=True, text=True)
    assert_one_line_error(res, 1)
    assert "permission denied" in res.stderr


def test_compare_needs_two_files_and_shared_cells(tmp_path):
    res = vt("report", "--compare", str(GOLDEN))
    assert_one_line_error(res, 2)
    doc = recfmt.read(GOLDEN)
    for r in doc["runs"]:
        r["value_size"] = 999  # no cell in common
    other = tmp_path / "other.vtrace"
    recfmt.write(other, doc)
    res = vt("report", "--compare", str(GOLDEN), str(other))
    assert_one_line_error(res, 1)
    assert "share no measured cells" in res.stderr


# -- bad options and servers --------------------------------------------------------------------
@pytest.mark.parametrize("args", [["--sizes", "0"], ["--sizes", "abc"], ["--duration", "0"], ["--duration", "-2"],
                                  ["--repeat", "0"], ["--workload", "x"], ["--backend", "x"],
                                  ["--inject-fsync-delay", "4 parsecs"], ["--inject-fsync-delay", "lognormal:4ms"],
                                  # a flag the chosen backend cannot honour
                                  ["--backend", "none", "--socket-writes"], ["--backend", "shim", "--loop-sample"],
                                  ["--backend", "none", "--aof-flush-probe"],
                                  # the intervention needs a launched server, delays and a workload
                                  ["--fsync-sensitivity", "fast"], ["--fsync-sensitivity", "0ms"],
                                  ["--fsync-sensitivity", "2ms", "--workload", "none"],
                                  ["--fsync-sensitivity", "2ms", "--backend", "none"],
                                  ["--fsync-sensitivity", "2ms", "--attach", str(os.getpid())]])
def test_bad_options_exit_2(args):
    assert_one_line_error(vt("record", *args), 2)


def test_output_in_missing_or_read_only_directory(tmp_path):
    assert_one_line_error(vt("record", *QUICK, "-o", str(tmp_path / "no" / "x.vtrace")), 2)
    assert_one_line_error(vt("report", str(GOLDEN), "-o", str(tmp_path / "no" / "x.md")), 2)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() != 0:
        assert_one_line_error(vt("record", *QUICK, "-o", str(ro / "x.vtrace")), 2)


def test_bad_benchmark_client(tmp_path):
    assert_one_line_error(vt("record", *QUICK, "--benchmark", str(tmp_path / "nope")), 2)
    fake = tmp_path / "fake-benchmark"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    assert_one_line_error(vt("record", *QUICK, "--benchmark", str(fake)), 2)
    res = vt("record", *QUICK, env={**os.environ, "PATH": "/nonexistent"})
    assert_one_line_error(res, 1)
    assert "no benchmark client found" in res.stderr


@pytest.mark.parametrize("cmd,needle", [
    (["/nonexistent/valkey-server"], "not found"),
    (["NOT_EXECUTABLE"], "not executable"),
    (["false"], "exited"),
    (["sleep", "86399"], "never opened a TCP port"),  # an unusual argument: no other sleep matches
    ([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"], "never answered PING"),
])
def test_server_commands_that_are_not_valkey(tmp_path, cmd, needle):
    if cmd == ["NOT_EXECUTABLE"]:
        script = tmp_path / "valkey-server"
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o644)
        cmd = [str(script)]
    res = vt("record", *QUICK, "--server-timeout", "3", "--", *cmd)
    assert res.returncode in (1, 2)
    assert_one_line_error(res, res.returncode)
    assert needle in res.stderr
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == cmd]  # reaped


def test_server_port_already_in_use():
    from valkeytrace.server.binaries import embedded_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = vt("record", *QUICK, "--", embedded_server(), "--port", str(port), "--save", "")
    assert_one_line_error(res, 1)
    assert "Address already in use" in res.stderr and len(res.stderr) < 300, res.stderr  # the cause, not the log


# -- inputs are never destroyed -------------------------------------------------------------------
def test_outputs_never_overwrite_an_input_or_a_recording(tmp_path):
    rec = tmp_path / "a.vtrace"
    shutil.copy(GOLDEN, rec)
    before = rec.read_bytes()
    renamed = tmp_path / "report.txt"
    shutil.copy(GOLDEN, renamed)  # a recording under another name is still one
    for args in (["report", str(rec), "-o", str(rec)], ["report", str(rec), "-o", str(tmp_path / "b.vtrace")],
                 ["report", str(rec), "-o", str(renamed)],
                 ["report", "--compare", str(GOLDEN), str(rec), "-o", str(rec)],
                 ["export", str(rec), "--perfetto", str(rec)], ["export", str(rec), "--perfetto", str(renamed)]):
        assert_one_line_error(vt(*args), 2)
    assert rec.read_bytes() == before and recfmt.read(renamed)
    assert not (tmp_path / "b.vtrace").exists()


def test_the_format_follows_the_output_extension(tmp_path):
    for ext, probe in ((".md", lambda t: t.startswith("#") or "|---" in t), (".json", lambda t: json.loads(t)),
                       (".html", lambda t: "<html" in t.lower()), (".csv", lambda t: "," in t.splitlines()[0])):
        out = tmp_path / f"r{ext}"
        res = vt("report", str(GOLDEN), "-o", str(out))
        assert res.returncode == 0, res.stderr
        assert probe(out.read_text()), (ext, out.read_text()[:200])
    out = tmp_path / "forced"  # no extension: --format decides
    assert vt("report", str(GOLDEN), "--format", "json", "-o", str(out)).returncode == 0
    json.loads(out.read_text())
    clash = tmp_path / "clash.md"  # an extension that names another format: refused, nothing written
    res = vt("report", str(GOLDEN), "--format", "json", "-o", str(clash))
    assert_one_line_error(res, 2)
    assert "--format is json" in res.stderr and not clash.exists()


def test_nothing_to_report_or_export_is_an_error(tmp_path):
    doc = recfmt.read(GOLDEN)
    for r in doc["runs"]:
        r["status"], r["error"] = "failed", "the client died"
    failed = tmp_path / "failed.vtrace"
    recfmt.write(failed, doc)
    res = vt("report", str(failed))
    assert_one_line_error(res, 1)
    assert "no measured run" in res.stderr
    res = vt("report", "--compare", str(GOLDEN), str(GOLDEN))
    assert_one_line_error(res, 2)
    assert "compared with itself" in res.stderr
    res = vt("export", str(GOLDEN), "--perfetto", str(tmp_path / "t.json"), "--from", "9000", "--to", "9001")
    assert_one_line_error(res, 2)
    assert not (tmp_path / "t.json").exists()


def test_attach_to_missing_or_non_valkey_process():
    assert_one_line_error(vt("record", "--attach", "999999", *QUICK), 2)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        res = vt("record", "--attach", str(sleeper.pid), *QUICK)
        assert_one_line_error(res, 2)
        assert "'sleep' is not a valkey or redis server" in res.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


def test_attach_to_another_users_server_without_privileges(as_nobody):
    from valkeytrace.server.process import EmbeddedServer

    with EmbeddedServer(appendfsync="everysec") as srv:
        res = subprocess.run(["runuser", "-u", "nobody", "--", VT, "record", "--attach", str(srv.pid), *QUICK],
                             capture_output=True, text=True, timeout=60)
        assert_one_line_error(res, 2)
        assert "another user" in res.stderr or "permission denied" in res.stderr


def test_ebpf_without_privileges_is_a_usage_error(as_nobody):
    res = subprocess.run(["runuser", "-u", "nobody", "--", VT, "record", *QUICK[:-2], "--backend", "ebpf"],
                         capture_output=True, text=True, timeout=60)
    assert_one_line_error(res, 2)
    assert "needs root or CAP_BPF" in res.stderr


# -- interruption and faults ----------------------------------------------------------------------
def _held_prog_ids() -> set[int]:
    """The ids of the BPF programs some process holds an fd of (the kernel's fdinfo of every fd)."""
    import glob
    import re

    held = set()
    for info in glob.glob("/proc/[0-9]*/fdinfo/*"):
        try:
            with open(info) as f:
                m = re.search(r"^prog_id:\s+(\d+)", f.read(), re.M)
        except OSError:
            continue
        if m:
            held.add(int(m.group(1)))
    return held


def _leftovers(doc) -> list[str]:
    problems = []
    pid = doc["server"].get("pid")
    if pid and psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        problems.append(f"server {pid} still running")
    port = doc["server"].get("port")
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] and "benchmark" in p.info["name"] and str(port) in (p.info["cmdline"] or []):
            problems.append(f"client {p.pid} still running")
    tracefs = Path("/sys/kernel/tracing/uprobe_events")
    if tracefs.exists() and "valkey" in tracefs.read_text():
        problems.append("uprobes left in uprobe_events")
    if shutil.which("bpftool") and os.geteuid() == 0:
        # a program of ours that no process holds any more is a leak (pinned or orphaned); one a
        # live process holds (its fd in /proc/PID/fdinfo: this bpftool names no holders) belongs to
        # another valkeytrace run on this machine (the suite's other worker)
        # a program whose last fd another worker closed lingers in the kernel's list for a grace period
        # (a getppid test program was once seen so): a leak is one still there, unheld, two seconds on
        ours = ("on_before_sleep", "on_flush_enter", "on_flush_return", "tracepoint__sch", "tracepoint__sys")
        leaked: list = []
        deadline = time.monotonic() + 2.0
        while True:
            progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True,
                                              text=True).stdout or "[]")
            held = _held_prog_ids()
            leaked = [p for p in progs if str(p.get("name", "")).startswith(ours) and p.get("id") not in held]
            if not leaked or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if leaked:
            problems.append(f"BPF programs still loaded: {[p['name'] for p in leaked]}")
    return problems


def _wait_for_runs(partial: Path, n: int, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if partial.exists():
            try:
                doc = recfmt.read(partial)
                if sum(r["status"] == "ok" for r in doc["runs"]) >= n:
                    return doc
            except Exception:
                pass
        time.sleep(0.2)
    raise AssertionError("the recording never reached the expected number of runs")


@pytest.mark.parametrize("sig", [signal.SIGTERM])  # SIGINT takes the same handler (session._on_term)
def test_signal_during_record_keeps_measured_runs_and_leaves_nothing(tmp_path, sig):
    backend = "ebpf" if os.geteuid() == 0 else "shim"
    out = tmp_path / "int.vtrace"
    # started as a non-interactive shell starts a background job: SIGINT inherited ignored (the
    # signal was lost so once in a fresh clone's `make test`: exit 0, nothing on stderr)
    proc = subprocess.Popen([VT, "record", "--workload", "read-heavy", "--sizes", "64,256", "--repeat", "3",
                             "--duration", "2", "--keyspace", "500", "--backend", backend, "--no-demand-pass",
                             "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        _wait_for_runs(Path(str(out) + ".partial"), 1)
        time.sleep(0.8)  # in the middle of the next run
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    doc = recfmt.read(out)
    assert doc["complete"] is False
    assert sum(r["status"] == "ok" for r in doc["runs"]) >= 1
    assert doc["runs"][-1]["status"] in ("interrupted", "ok")
    time.sleep(0.5)
    assert _leftovers(doc) == []
    assert not Path(str(out) + ".partial").exists()


def _measured_clients(port: str, timeout_s: float = 30.0) -> list:
    """The benchmark clients of a measured window on this port, waited for (not the calibration's,
    which asks for ENDLESS_REQUESTS): under a loaded machine calibration takes longer than it does alone."""
    endless = str(ENDLESS_REQUESTS)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [p for p in psutil.process_iter(["name", "cmdline"])
                 if p.info["name"] and "benchmark" in p.info["name"]
                 and port in (p.info["cmdline"] or []) and endless not in (p.info["cmdline"] or [])]
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"no measured client on port {port} within {timeout_s} s")


def _kill_a_measured_client(port: str) -> None:
    """SIGKILL a measured client of this port: another is looked for when the one found ended first (a
    window's try that ends short starts another)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for c in _measured_clients(port):
            try:
                c.kill()
                return
            except psutil.NoSuchProcess:
                continue
    raise AssertionError(f"no measured client on port {port} could be killed")


def _kill_during_second_run(tmp_path, victim: str):
    out = tmp_path / f"{victim}.vtrace"
    proc = subprocess.Popen([VT, "record", "--workload", "write-only", "--sizes", "64", "--repeat", "3",
                             "--duration", "1.5", "--keyspace", "500", "--backend", "none", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        doc = _wait_for_runs(Path(str(out) + ".partial"), 1)
        port = str(doc["server"]["port"])
        _measured_clients(port)  # the second run's window has begun
        time.sleep(0.3)
        if victim == "server":
            os.kill(doc["server"]["pid"], signal.SIGKILL)
        else:
            _kill_a_measured_client(port)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err, recfmt.read(out)


def test_server_killed_mid_run(tmp_path):
    rc, err, doc = _kill_during_second_run(tmp_path, "server")
    assert rc == 1 and "killed by SIGKILL" in err
    assert doc["runs"][0]["status"] == "ok" and "server_exit" not in doc["runs"][0]
    assert doc["runs"][1]["status"] == "failed" and "killed by SIGKILL" in doc["runs"][1]["error"]
    assert doc["runs"][1]["server_exit"]["signal"] == "SIGKILL"
    assert [(w["figures"]["signal"], w["figures"]["status"]) for w in doc["warnings"] if w["code"] == "server_ended"] \
        == [("SIGKILL", None)], doc["warnings"]
    assert len(doc["runs"]) == 2  # nothing attempted after the server was gone


def test_client_killed_mid_run(tmp_path):
    rc, err, doc = _kill_during_second_run(tmp_path, "client")
    assert rc == 1
    statuses = [r["status"] for r in doc["runs"]]
    assert statuses == ["ok", "failed", "ok"], statuses  # the rest ran
    assert _leftovers(doc) == []


def test_recording_cannot_be_written_disk_full(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tiny tmpfs")
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(mnt)], check=True)
    try:
        previous = mnt / "x.vtrace"
        previous.write_bytes(b"previous recording")
        res = vt("record", "--workload", "write-only", "--sizes", "64", "--repeat", "1", "--duration", "1",
                 "--keyspace", "500", "--backend", "none", "-o", str(previous))
        assert_one_line_error(res, 2)  # an existing file is refused before anything runs
        assert "refusing to overwrite" in res.stderr and previous.read_bytes() == b"previous recording"
        res = vt("record", "--workload", "write-only", "--sizes", "64", "--repeat", "1", "--duration", "1",
                 "--keyspace", "500", "--backend", "none", "--force", "-o", str(previous))
        assert_one_line_error(res, 1)  # --force on a full disk: the write fails, the old file stays
        assert "No space left on device" in res.stderr
        assert previous.read_bytes() == b"previous recording"  # untouched
        assert not [f for f in os.listdir(mnt) if f.endswith(".tmp")]  # temporary file removed
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_sudo_runs_the_server_as_the_invoking_user(tmp_path):
    import tempfile

    from valkeytrace.server.binaries import embedded_server
    from valkeytrace.server.process import EmbeddedServer

    if os.geteuid() != 0:
        pytest.skip("needs root")
    # a copy the invoking user can execute, wherever this checkout sits
    bindir = tempfile.mkdtemp()
    os.chmod(bindir, 0o755)
    binary = shutil.copy(embedded_server(), bindir)
    with EmbeddedServer(appendfsync="everysec", run_as=(65534, 65534), binary=binary) as srv:
        assert psutil.Process(srv.pid).uids().real == 65534
        assert os.stat(srv.workdir).st_uid == 65534
    shutil.rmtree(bindir)


def test_print_probes_follows_the_probe_options():
    outs = {}
    for opt in ("", "--socket-writes", "--loop-sample", "--aof-flush-probe"):
        res = vt("record", "--print-probes", *([opt] if opt else []))
        assert res.returncode == 0, res.stderr
        outs[opt] = res.stdout
    assert len(set(outs.values())) == 4
    assert "-DTRACE_SYSCALLS=1" in outs["--socket-writes"] and "-DTRACE_SYSCALLS=0" in outs[""]
    assert "probe groups: calls, fs, sched, requests, loop" in outs["--loop-sample"]
