"""The explanation's controls on the real server (embedded valkey, eBPF, io-threads 1), with
answers known in advance: an A/A pair is not significant; always vs everysec at +4 ms is the
fsync's doing; a busy loop beside the server is not; the fsync-delay intervention moves GET
latency under always and not under everysec. Short runs: the acceptance check
(../shared/checks/09-explain-controls) runs the same cases at --repeat 3."""
import json
import subprocess
import sys

import pytest
from vtcli import VT, report_json, skip_unless_recorded

pytestmark = pytest.mark.integration
CELL = ["--workload", "read-heavy", "--sizes", "64", "--duration", "1.5", "--keyspace", "5000",
        "--io-threads", "1", "--backend", "ebpf"]


def record(path, *args):
    res = subprocess.run([VT, "record", *CELL, "-o", str(path), *args], capture_output=True, text=True, timeout=300)
    skip_unless_recorded(res)
    return path



def get_p50(doc):
    return next(e for e in doc["compare"]["explanation"] if e["op"] == "GET" and e["metric"] == "p50_us")


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    d = tmp_path_factory.mktemp("controls")
    return {
        "a1": record(d / "a1.vtrace", "--repeat", "2", "--appendfsync", "always", "--inject-fsync-delay", "4ms"),
        "a2": record(d / "a2.vtrace", "--repeat", "2", "--appendfsync", "always", "--inject-fsync-delay", "4ms"),
        "e": record(d / "e.vtrace", "--repeat", "2", "--appendfsync", "everysec", "--inject-fsync-delay", "4ms"),
    }


def test_a_a_is_not_significant_and_gets_no_share(recs):
    e = get_p50(report_json(recs["a1"], recs["a2"]))
    assert e["significant"] is False, e["claim"]
    assert e["explained_share"] is None and "no significant change (n=2 vs n=2" in e["claim"]


def test_always_vs_everysec_is_the_fsync_and_adds_up(recs):
    doc = report_json(recs["a1"], recs["e"])
    e = get_p50(doc)
    assert e["significant"] is True, e["claim"]
    assert 0.8 <= e["explained_share"] <= 1.2 and e["leading_component"] == "fsync", e["claim"]
    observed = e["evidence"]["candidate"]["p50_us"] - e["evidence"]["baseline"]["p50_us"]
    assert sum(c["delta_us"] for c in e["components"]) == pytest.approx(observed, rel=0.01)
    # the baseline's what-if, checked against the everysec candidate (SETs acknowledged early)
    wi = [w for w in doc["compare"]["whatif"] if w["metric"] == "p50_us"]
    assert wi and wi[0]["scenario"] == "fsync_off_main_thread_early_ack"
    assert abs(wi[0]["error_pct"]) <= 50, wi[0]  # the check holds it to 30% at --repeat 3
    assert wi[0]["inputs"]["context"]["server_cpu_us_per_get"] > 0 and wi[0]["inputs"]["get_clients"] == 50
    # from the two GET passes (alone; with the 8 background clients reading), both measured
    assert wi[0]["inputs"]["model"] == "get_passes" and wi[0]["inputs"]["loaded_background_tps"] > 0, wi[0]


def test_a_busy_loop_is_not_the_fsync_and_shows_in_the_host_cpu(recs, tmp_path):
    hog = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 120\nwhile time.time() < t: pass"])
    try:
        busy = record(tmp_path / "busy.vtrace", "--repeat", "2", "--appendfsync", "everysec",
                      "--inject-fsync-delay", "4ms", "--label", "everysec-busy-loop")
    finally:
        hog.kill()
        hog.wait()
    doc = report_json(recs["e"], busy)
    e = get_p50(doc)
    fsync = next(c for c in e["components"] if c["name"] == "fsync")
    assert fsync["base_us"] == 0 and fsync["cand_us"] == 0  # neither main thread fsyncs
    # the clients on a CPU of their own and the server on the other (record --client-cpus auto):
    # the loop shares the server's CPU, and the main thread preempts it at each wake-up, so GET p50
    # moves +5% to +54% (significant in 9 of 12 check-09 runs, and in CI once +10%: not) while the
    # throughput falls a third to a half every time; the claim says which
    assert e["explained_share"] is None or abs(e["explained_share"]) <= 0.1, e["claim"]
    if e["significant"]:
        assert e["leading_component"] in ("outside_server", "cpu_wait", "on_cpu") and "CPU" in e["claim"]
    else:
        assert "But GET TPS moved significantly" in e["claim"], e["claim"]
    assert "other processes +" in e["claim"], e["claim"]
    # the busy loop is in the window's CPU accounting, whatever the latency did
    cells = {r["label"]: r["cells"][0] for r in doc["runs"]}
    rows = [r for r in doc["compare"]["rows"] if r["op"] == "GET"]
    assert rows[0]["tps_delta_pct"] < -10  # the clients lose CPU to the loop
    raw = subprocess.run([sys.executable, "-c", f"from valkeytrace.recording import format as f; import json; "
                          f"print(json.dumps([r['host_cpu'] for r in f.read('{busy}')['runs']]))"],
                         capture_output=True, text=True, check=True)
    # the loop's CPU, left of it beside a main thread that preempts it at every wake-up (0.19-0.31 here)
    assert all(h["other_cores"] >= 0.1 for h in json.loads(raw.stdout)), raw.stdout
    assert cells["everysec-busy-loop"]["ops"]["GET"]["tps"] > 0
    # who waited for a CPU: the clients' share of their time (schedstat), on every run; the claim
    # that names the host's CPU says where the loop's contention landed
    for h in json.loads(raw.stdout):
        w = h["clients_cpu_wait"]
        assert 0 <= w["measured"] <= 1 and 0 <= w["background"] <= 1, h
    if "Host CPU:" in e["claim"]:
        assert "Waiting for a CPU: the main thread" in e["claim"] and "the GET clients" in e["claim"], e["claim"]


def _slope(path, role=None):
    doc = report_json(path)
    ss = [s for s in doc["runs"][0]["sensitivity"] if s["op"] == "GET" and s["metric"] == "p50_us"
          and (role is None or s["thread_role"] == role)]
    assert ss, doc["runs"][0]["sensitivity"]
    return ss[0], doc


def test_fsync_sensitivity_moves_get_under_always_not_everysec(tmp_path):
    # one repeat, yet each added delay is the median of 3 runs (recorder.SENSITIVITY_MIN_RUNS): at one
    # run per level the p50 at +2 ms sometimes takes the longer path (2 fsync cycles where 0 and
    # +4 ms take 1: R² 0.77-0.85 in CI and check 09), a real mode of the server
    always = record(tmp_path / "sa.vtrace", "--repeat", "1", "--appendfsync", "always", "--fsync-sensitivity", "2ms,4ms")
    s, doc = _slope(always, "main")
    assert 0.5 <= s["slope"] <= 3.0 and s["r2"] >= 0.9, s
    assert [p[0] for p in s["points"]] == sorted(p[0] for p in s["points"])  # measured fsync grows with the delay
    assert s["points"][-1][0] > 4000  # +4 ms is in the measured main-thread fsync
    assert s["runs_per_point"] == [1, 3, 3], s
    assert doc["runs"][0]["cells"][0]["repeats"] == 1  # the intervention runs stay out of the tables
    everysec = record(tmp_path / "se.vtrace", "--repeat", "1", "--appendfsync", "everysec", "--fsync-sensitivity", "2ms,4ms")
    s, _ = _slope(everysec)
    assert s["thread_role"] == "bio_aof" and abs(s["slope"]) < 0.2, s


@pytest.mark.parametrize("backend", ["shim", "both"])
def test_fsync_sensitivity_under_the_other_backends(tmp_path, backend):
    # the added delay must be in the measured fsync time whichever backend times it (with both,
    # eBPF times the shim's wrappers, as with --inject-fsync-delay)
    path = record(tmp_path / "s.vtrace", "--repeat", "1", "--appendfsync", "always", "--fsync-sensitivity", "2ms,4ms",
                  "--backend", backend)
    s, _ = _slope(path, "main")
    assert 0.5 <= s["slope"] <= 3.0 and s["points"][-1][0] > 4000, s
