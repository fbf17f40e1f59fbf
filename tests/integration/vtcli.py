"""The valkeytrace command as the integration tests run it: the venv's own entry point, in a
subprocess, output captured (imported by the test modules; pytest puts this directory on the path)."""
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

VT = str(Path(sys.executable).with_name("valkeytrace"))
DATA = Path(__file__).resolve().parent.parent / "data"


TAG = "VALKEYTRACE_TEST_TAG"


def vt(*args, timeout=180, env=None, **kw) -> subprocess.CompletedProcess:
    """The command, its environment tagged (res.tag): every server and client it starts inherits the tag,
    so a test finds what it left running among what the suite's other worker runs (tagged())."""
    tag = uuid.uuid4().hex
    res = subprocess.run([VT, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                         env={**(env if env is not None else os.environ), TAG: tag}, **kw)
    res.tag = tag  # type: ignore[attr-defined]
    return res


def tagged_env(tag: str) -> dict:
    return {**os.environ, TAG: tag}


def tagged(tag: str, name: str = "valkey-server") -> set[int]:
    """The live processes named `name` that a command run with this tag started (their environment has it)."""
    import psutil

    mark, out = f"{TAG}={tag}".encode(), set()
    for p in psutil.process_iter(["name", "cmdline", "status"]):
        if name not in (p.info["name"] or "") and name not in " ".join(p.info["cmdline"] or []):
            continue
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                held = mark in f.read()
        except OSError:
            continue
        if held and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.add(p.pid)
    return out


_REPORTS: dict = {}  # (paths, whatif, their mtimes) -> the report's JSON text: a recording reported once a process


def report_json(*paths, whatif: bool = True) -> dict:
    """`report --format json` of one recording, or of two compared (baseline, candidate; whatif=False:
    --no-whatif); a fresh copy each call, the command run once for a recording as it is on disk."""
    key = (tuple(map(str, paths)), whatif, tuple(os.stat(p).st_mtime_ns for p in paths))
    if key not in _REPORTS:
        args = ["--compare", *paths] if len(paths) == 2 else [paths[0]]
        res = vt("report", *args, "--format", "json", *([] if whatif else ["--no-whatif"]), timeout=120)
        assert res.returncode == 0, res.stderr
        _REPORTS[key] = res.stdout
    return json.loads(_REPORTS[key])


def said(entry: dict) -> str:
    """An explanation entry's sentence, for an assertion's message (tests assert its codes and figures)."""
    return entry.get("claim", "")


def must_have(reason: str):
    """Skip a test that needs what this machine lacks, except in CI as root, where `make setup`
    installs it (bcc, tracefs, kernel headers): there a missing capability fails the test, so a
    broken bcc cannot turn the eBPF suite into skips."""
    import os

    import pytest

    if os.environ.get("CI") and os.geteuid() == 0:
        pytest.fail(f"{reason}: CI runs as root after make setup, which should have provided it")
    pytest.skip(reason)


def skip_unless_recorded(res: subprocess.CompletedProcess):
    """An eBPF `record` that could not load its probes for want of privileges skips (fails in CI
    as root); any other failure fails the test with its stderr."""
    if res.returncode != 0 and "needs root" in res.stderr:
        must_have("eBPF needs root or CAP_BPF+CAP_PERFMON")
    assert res.returncode == 0, res.stderr


def disk_fdatasync_us(n: int = 40) -> tuple[float, float]:
    """(p50, max) µs of this disk's own fdatasync after a small append, measured now in the
    directory the embedded server writes its AOF to (the system's temporary directory): the
    tolerance for an injected delay judged on top of it."""
    import os
    import statistics
    import tempfile
    import time

    with tempfile.NamedTemporaryFile(prefix="valkeytrace-disk-") as f:
        times = []
        for _ in range(n):
            os.write(f.fileno(), b"*3\r\n$3\r\nSET\r\n" + b"x" * 100)
            t = time.perf_counter()
            os.fdatasync(f.fileno())
            times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times), max(times)


def probes_loaded(pid: int, timeout: float = 60.0) -> None:
    """Until record (pid) holds its BPF programs (its fds: anon_inode:bpf-prog), then a moment for the
    uprobes it attaches next: a server that dies before them is a start that failed, not this test's."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            held = sum(1 for fd in fds if "bpf-prog" in os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            held = 0
        if held:
            time.sleep(1.0)
            return
        time.sleep(0.1)
    raise AssertionError(f"record {pid} loaded no BPF program in {timeout:g} s")
