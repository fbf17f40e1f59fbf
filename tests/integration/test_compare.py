"""`valkeytrace compare` end to end, with real launches of the embedded server: the sides
alternate (ABBA), each run carries its launch, the verdict's significance comes from the launches
(interval_pct, launches), and Ctrl-C keeps what both sides measured and leaves no server behind."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from valkeytrace.recording import format as recfmt
from vtcli import VT, tagged, tagged_env, vt

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
COMMON = ["--workload", "read-heavy", "--no-demand-pass", "--sizes", "64", "--duration", "1", "--repeat", "1",
          "--io-threads", "1", "--keyspace", "500", "--appendfsync", "everysec", "--backend", "none"]


def test_per_side_options_are_refused_in_common(tmp_path):
    # compare takes record's common options (cli/options.py) and a side's own as --baseline-/--candidate-
    res = vt("compare", "--launches", "3", *COMMON, "--label", "x", "-o", tmp_path / "c")
    assert res.returncode == 2 and "No such option '--label'" in res.stderr and "--baseline-label" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = vt("compare", "--launches", "3", *COMMON, "-o", tmp_path / "c", "--", "valkey-server")
    assert res.returncode == 2 and "unexpected extra argument" in res.stderr and not (tmp_path / "c").exists()


def test_ctrl_c_keeps_both_sides_and_leaves_no_server(tmp_path):
    out, tag = tmp_path / "cmp", uuid.uuid4().hex
    proc = subprocess.Popen([VT, "compare", "--launches", "2", *COMMON, "-o", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=tagged_env(tag))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (out / ".launches" / "candidate-1.vtrace").exists():
        time.sleep(0.2)
    assert (out / ".launches" / "candidate-1.vtrace").exists(), "two launches did not finish in time"
    time.sleep(2.0)  # inside the third launch (B C C B: the second candidate's)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    for side in ("baseline", "candidate"):
        doc = recfmt.read(out / f"{side}.vtrace")
        assert any(r["status"] == "ok" for r in doc["runs"]), side
    time.sleep(0.5)
    assert not tagged(tag), "a server was left running"
    # the complete launches stay for the same command to resume: it runs only the missing ones
    kept = sorted(p.name for p in (out / ".launches").glob("*.vtrace"))
    assert "baseline-1.vtrace" in kept and "candidate-1.vtrace" in kept, kept
    other = vt("compare", "--launches", "2", *COMMON, "--candidate-config", "hz=20", "-o", out)
    assert other.returncode == 2 and "other options" in other.stderr
    again = vt("compare", "--launches", "2", *COMMON, "-o", out, timeout=600)
    assert again.returncode == 0, again.stderr
    for side in ("baseline", "candidate"):
        doc = recfmt.read(out / f"{side}.vtrace")
        assert sorted({r["launch"] for r in doc["runs"] if r["status"] == "ok"}) == [1, 2], side
    assert not os.path.exists(out / ".launches")


@pytest.mark.timed
def test_launches_alternate_compile_once_and_decide_significance(tmp_path, needs_bpf):
    """A 3 + 3 compare under eBPF: the sides alternate (ABBA, never three in a row) and the verdict's
    significance comes from the launches; the first launch compiles the probes and the other five take
    the program it parked (tracers/ebpf_pool.py), ready within 1.5 s; each reused launch still measures
    its own server: its main thread's fsyncs counted, and the kernel's schedstat agrees with the probes'
    on-CPU and run-queue time (the report warns of any disagreement). Run again, the complete compare is
    kept; with other options, refused."""
    out = tmp_path / "cmp"
    cell = ["--workload", "read-heavy", "--sizes", "64", "--duration", "1", "--repeat", "1", "--io-threads", "1",
            "--keyspace", "2000", "--appendfsync", "always", "--backend", "ebpf", "--no-demand-pass",
            "--no-whatif"]  # its verdict from the launches: no what-if read
    res = vt("compare", "--launches", "3", *cell, "--candidate-config", "hz=20", "-o", out, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "Verdict" in res.stdout and "significance from the server launches: 3 vs 3" in res.stdout
    probes, starts = [], []
    for side in ("baseline", "candidate"):
        doc = recfmt.read(out / f"{side}.vtrace")
        runs = [r for r in doc["runs"] if r["status"] == "ok"]
        assert sorted(r["launch"] for r in runs) == [1, 2, 3]
        assert [x["launch"] for x in doc["launches"]] == [1, 2, 3]
        starts += [(r["started_at"], side[0]) for r in runs]
        for r in doc["runs"]:
            srv = r["server"]
            main = next(t for t in srv["threads"] if t["tid"] == srv["main_tid"])
            assert main["calls"]["fdatasync"]["count"] > 0, (side, r["launch"])  # its own server, not the last one
            assert srv["pid"] == next(x["pid"] for x in doc["launches"] if x["launch"] == r["launch"])
            probes.append((side, r["launch"], srv["probe"]["compile_ms"], srv["probe"]["attach_ms"]))
    assert "".join(s for _, s in sorted(starts)) == "bccbbc"  # ABBA, never three in a row
    assert not (out / ".launches").exists()
    compiled = [p for p in probes if p[2] > 0]
    assert len(compiled) == 1 and compiled[0][:2] == ("baseline", 1), probes
    assert all(a <= 1500 for _, _, c, a in probes if c == 0), probes
    d = json.loads(vt("report", "--compare", out / "baseline.vtrace", out / "candidate.vtrace", "--format", "json",
                      "--no-whatif").stdout)
    assert not [w for r in d["runs"] for w in r["warnings"] if w["code"] == "schedstat"], [r["warnings"] for r in d["runs"]]
    (v,) = [x for x in d["compare"]["verdict"] if x["op"] == "GET" and x["metric"] == "p50_us"]
    assert v["launches"] == [3, 3] and len(v["interval_pct"]) == 2
    assert v["interval_pct"][0] <= v["change_pct"] <= v["interval_pct"][1]
    assert v["rule_code"] == "rule.launches"
    # benchmarks/walltime.py reads this compare's breakdown (its --from mode; tests/integration/test_benchmarks.py)
    wt = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "walltime.py"), "--from", str(out)],
                        capture_output=True, text=True, timeout=120)
    line = next((x for x in wt.stdout.splitlines() if x.startswith("launches that compiled the probes")), "")
    assert wt.returncode == 0 and line.split()[-2:] == ["1", "0"], wt.stdout
    again = vt("compare", "--launches", "3", *cell, "--candidate-config", "hz=20", "-o", out)
    assert again.returncode == 0 and "complete: its report" in again.stderr and "Verdict" in again.stdout
    other = vt("compare", "--launches", "3", *cell, "-o", out)
    assert other.returncode == 2 and "other options" in other.stderr
