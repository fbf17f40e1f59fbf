"""What a user has is never surprised (issue 38), against the real server and real files: an
existing file is never overwritten, an output it cannot write is refused, an attached server is
only observed, the port and options are the user's, a daemonizing server and values that cannot
work are refused before anything starts, a server's own start-up error names its directive, and
the figures a report prints agree with the recording (the window as long as asked, the text
table's figures those of the JSON)."""
import json
import os
import re
import subprocess
import time

import pytest

from valkeytrace.recording import format as recfmt
from valkeytrace.server.binaries import embedded_server
from valkeytrace.server.process import connect, free_port
from vtcli import VT, tagged, vt

pytestmark = pytest.mark.integration
SHORT = ["--workload", "read-heavy", "--no-demand-pass", "--sizes", "64", "--duration", "1", "--repeat", "1",
         "--keyspace", "500", "--io-threads", "1", "--backend", "none"]


def one_line(res):
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    return len(lines) == 1 and "Traceback" not in res.stderr


def test_files_are_never_overwritten_and_outputs_are_writable(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    res = vt("record", *SHORT, "-o", notes)
    assert res.returncode == 2 and one_line(res) and notes.read_text() == "mine"
    rec = tmp_path / "a.vtrace"
    assert vt("record", *SHORT, "-o", rec).returncode == 0
    before = rec.read_bytes()
    again = vt("record", *SHORT, "-o", rec)
    assert again.returncode == 2 and "--force" in again.stderr and rec.read_bytes() == before
    assert vt("record", *SHORT, "-o", rec, "--force").returncode == 0 and recfmt.read(rec)["runs"]
    for bad in (["report", rec, "-o", tmp_path / "a.pdf"], ["report", rec, "--format", "json", "-o", tmp_path / "a.md"],
                ["export", rec, "--perfetto", tmp_path / "t.txt"]):
        res = vt(*bad)
        assert res.returncode == 2 and one_line(res), (bad, res.stderr)
    res = vt("export", rec, "--perfetto", tmp_path / "t.json")  # --backend none: no timeline
    assert res.returncode == 1 and "no timeline" in res.stderr and not (tmp_path / "t.json").exists()


def test_an_attached_server_is_only_observed_and_pids_are_checked(tmp_path):
    for pid, code in (("0", 2), ("-5", 2), (str(os.getpid()), 2)):
        res = vt("record", "--attach", pid, "--duration", "1", "-o", tmp_path / "x.vtrace")
        assert res.returncode == code and one_line(res) and not (tmp_path / "x.vtrace").exists(), (pid, res.stderr)
    port = free_port()
    d = tmp_path / "srv"
    d.mkdir()
    proc = subprocess.Popen([embedded_server(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                             "--appendonly", "yes", "--save", ""], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                c = connect("127.0.0.1", port)
                c.set("mine", "1")
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        time.sleep(1)
        aof = sum(f.stat().st_size for f in (d / "appendonlydir").iterdir())
        res = vt("record", "--attach", proc.pid, "--duration", "1", "--repeat", "1", "--backend", "none",
                 "-o", tmp_path / "att.vtrace")
        assert res.returncode == 0, res.stderr
        assert c.dbsize() == 1 and sum(f.stat().st_size for f in (d / "appendonlydir").iterdir()) == aof
        assert [r["workload"] for r in recfmt.read(tmp_path / "att.vtrace")["runs"]] == ["none"]
    finally:
        proc.terminate()
        proc.wait()


def test_the_port_and_the_options_are_the_users(tmp_path):
    port = free_port()
    res = vt("record", *SHORT, "--server-config", f"port={port}", "-o", tmp_path / "p.vtrace")
    assert res.returncode == 0, res.stderr
    assert recfmt.read(tmp_path / "p.vtrace")["server"]["port"] == port
    for bad in (["--appendfsync", "always", "--server-config", "appendfsync=everysec"],
                ["--port", str(port), "--server-config", f"port={port + 1}"],
                ["--server-config", "daemonize=yes"], ["--duration", "nan"], ["--duration", "inf"],
                ["--sizes", "100000000"], ["--benchmark", "/nonexistent/valkey-benchmark"]):
        res = vt("record", *SHORT, *[x for x in bad], "-o", tmp_path / "bad.vtrace")
        assert res.returncode == 2 and one_line(res), (bad, res.stderr)
        assert not tagged(res.tag) and not (tmp_path / "bad.vtrace").exists(), bad
    res = vt("record", *SHORT[:-4], "-o", tmp_path / "dz.vtrace", "--", embedded_server(), "--port", str(free_port()),
             "--daemonize", "yes")
    assert res.returncode == 2 and "daemonize" in res.stderr and one_line(res) and not tagged(res.tag)
    res = vt("record", *SHORT, "--server-config", "no-such-directive=1", "-o", tmp_path / "cfg.vtrace")
    assert res.returncode != 0 and "no-such-directive" in res.stderr and one_line(res), res.stderr
    # everysec from the config alone is what is recorded, and said so
    res = vt("record", *SHORT, "--server-config", "appendfsync=everysec", "-o", tmp_path / "e.vtrace")
    assert res.returncode == 0 and recfmt.read(tmp_path / "e.vtrace")["server"]["appendfsync"] == "everysec"


def test_dry_run_says_what_and_how_long_without_running(tmp_path):
    res = vt("record", "--workload", "all", "--sizes", "64,256", "--repeat", "2", "--duration", "5", "--dry-run")
    assert res.returncode == 0 and not tagged(res.tag)
    # the estimate is learned from this host's earlier recordings (59 s once in CI, minutes on a fresh
    # host): at least the 8 windows of 5 s it must wait out, and not an hour
    est = re.search(r"estimated: about (\d+) (s|min)\b", res.stdout)
    assert "runs: 8 a launch" in res.stdout and est, res.stdout
    assert 40 <= int(est.group(1)) * (60 if est.group(2) == "min" else 1) <= 3600, res.stdout
    res = vt("compare", "--launches", "4", "--workload", "write-only", "--duration", "2", "--repeat", "1",
             "--candidate-config", "appendfsync=everysec", "--dry-run", "-o", tmp_path / "c")
    assert res.returncode == 0 and "estimated: about" in res.stdout and "8 launch(es)" in res.stdout
    assert not (tmp_path / "c").exists()


@pytest.mark.timed
def test_the_window_lasts_as_asked_and_the_text_shows_the_jsons_figures(tmp_path):
    rec = tmp_path / "w.vtrace"
    users = {k: v for k, v in os.environ.items() if k != "VALKEYTRACE_WINDOW_ACCEPT"}  # make test widens it
    res = vt("record", "--workload", "read-heavy", "--sizes", "64", "--duration", "2", "--repeat", "2",
             "--keyspace", "500", "--io-threads", "1", "--backend", "shim", "--no-demand-pass", "-o", rec, timeout=300,
             env=users)
    assert res.returncode == 0, res.stderr
    assert recfmt.read(rec)["settings"]["window_accept"] == [0.075, 0.075]  # a user's acceptance, as recorded
    # a window is a count of requests at the rate calibrated before it (the second: the first's own rate):
    # it lasts as asked, within the 7.5% and the window's edges (~25 ms), unless all four tries missed, the last
    # kept then (the recording has each: once in CI 2.44, 1.79, 1.65, 2.28 s for 2, the host's GET rate moving
    # 36-49K/s between them); half or twice would be a fault
    for r in recfmt.read(rec)["runs"]:
        took, tries = r["window_end"] - r["window_start"], r["ops"]["GET"]["tries"]
        assert abs(took - 2) <= 2 * 0.075 + 0.05 or len(tries) == 4, (took, tries)
        assert 1.5 <= took <= 2.5 and abs(took - tries[-1][1]) <= 0.05, (took, tries)
    d = json.loads(vt("report", rec, "--format", "json").stdout)
    cell = d["runs"][0]["cells"][0]
    assert cell["server"]["main_thread"]["loop_iterations"] > 0  # INFO's count under the shim too
    text = subprocess.run([VT, "report", rec], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}).stdout
    get = cell["ops"]["GET"]
    row = next(line for line in text.splitlines() if " GET " in line and "64 B" in line)
    assert f"{get['p50_us']:,.0f}" in row and f"{get['tps'] / 1000:.2f}" in row, (row, get)
    narrow = subprocess.run([VT, "report", rec], capture_output=True, text=True, env={**os.environ, "COLUMNS": "60"})
    assert "…" not in narrow.stdout
    head = subprocess.run(f"{VT} report {rec} | head -n 1", shell=True, capture_output=True, text=True)
    assert head.stderr == "" and head.stdout.strip()
