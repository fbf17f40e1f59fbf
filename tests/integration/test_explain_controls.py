"""The explanation's controls on the real server (embedded valkey, eBPF, io-threads 1), with
answers known in advance: an A/A pair is not significant; always vs everysec at +4 ms is the
fsync's doing; a busy loop beside the server is not; the fsync-delay intervention moves GET
latency under always and not under everysec. Short runs: the acceptance check
(../shared/checks/09-explain-controls) runs the same cases at --repeat 3."""
import statistics
import subprocess
import sys

import pytest

from valkeytrace.recording import format as recfmt
from vtcli import VT, disk_fdatasync_us, report_json, said, skip_unless_recorded

pytestmark = [pytest.mark.integration, pytest.mark.timed]
CELL = ["--workload", "read-heavy", "--sizes", "64", "--duration", "1.5", "--keyspace", "5000",
        "--io-threads", "1", "--backend", "ebpf"]


def record(path, *args):
    res = subprocess.run([VT, "record", *CELL, "-o", str(path), *args], capture_output=True, text=True, timeout=300)
    skip_unless_recorded(res)
    return path



def base_cell(doc):
    return doc["runs"][0]["cells"][0]


def get_p50(doc):
    return next(e for e in doc["compare"]["explanation"] if e["op"] == "GET" and e["metric"] == "p50_us")


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    d = tmp_path_factory.mktemp("controls")
    # the A/A pair in alternating launches (A B B A), as compare records any pair: made one after the
    # other, the disk's own fdatasync drifted between them in CI (5.87 vs 5.01 ms at +4 ms) and the
    # pair was rightly told apart
    res = subprocess.run([VT, "compare", "--launches", "2", "--repeat", "1", *CELL, "--appendfsync", "always",
                          "--inject-fsync-delay", "4ms", "-o", str(d / "aa")], capture_output=True, text=True, timeout=600)
    skip_unless_recorded(res)
    return {
        "a1": d / "aa" / "baseline.vtrace",
        "a2": d / "aa" / "candidate.vtrace",
        # with its GET-only passes, though nothing reads them: they also warm the server before its window,
        # and without them the what-if judged against this everysec GET p50 missed by 58.6% once in CI
        "e": record(d / "e.vtrace", "--repeat", "2", "--appendfsync", "everysec", "--inject-fsync-delay", "4ms"),
    }


def test_a_a_is_not_significant_and_gets_no_share(recs):
    e = get_p50(report_json(recs["a1"], recs["a2"]))
    assert e["significant"] is False, said(e)
    sig = next(n for n in e["notes"] if n["code"].startswith("significance."))
    assert e["explained_share"] is None and sig["figures"]["n"] == [2, 2], sig
    if sig["code"] == "significance.paths":
        # the server's other path in one launch (issue 57: fsync cycles per GET 1.91 and 1.22 against 1.85
        # and 1.94 once in CI): no significance from it, said so, only where a side's repeats are >= 0.5
        # cycles apart; or (tables.path_bound's second branch) where the sides' median paths lie 0.1 cycles or
        # more apart (1.70 against 1.84 once in the timed phase, 2026-12-07): a change of path one launch a
        # side cannot tell from the launch's mode
        pa, pb = sig["figures"]["paths"]
        split = any(len(p) == 2 and max(p) - min(p) >= 0.5 for p in (pa, pb))
        assert split or (pa and pb and abs(statistics.median(pa) - statistics.median(pb)) >= 0.1), sig
    else:
        assert sig["code"] == "significance.none", sig


def test_always_vs_everysec_is_the_fsync_and_adds_up(recs):
    doc = report_json(recs["a1"], recs["e"])
    # --no-whatif: the same report without the baseline's prediction of the candidate (its simulation)
    bare = report_json(recs["a1"], recs["e"], whatif=False)
    assert doc["compare"]["whatif"] and bare["compare"]["whatif"] == []
    assert bare["compare"]["rows"] == doc["compare"]["rows"] and bare["runs"] == doc["runs"]
    assert bare["compare"]["explanation"] == doc["compare"]["explanation"]
    assert [v["change_pct"] for v in bare["compare"]["verdict"]] == [v["change_pct"] for v in doc["compare"]["verdict"]]
    e = get_p50(doc)
    assert e["significant"] is True, said(e)
    # the baseline's median repeat(s), each on its path: one fsync cycle per GET, or (1 run in 4
    # here) none, the median GET answered by iterations that executed no write
    mi = e["evidence"]["model_inputs"]["baseline"]
    used = mi.get("per_repeat") or [mi]
    quick = [u["request_iterations"]["quick"] for u in used]
    fsync = next(c for c in e["components"] if c["name"] == "fsync")
    assert fsync["cand_us"] == 0
    if all(quick):  # the median GET waited no fsync: the change is not the fsync's
        assert fsync["base_us"] == 0, said(e)
        assert (e["explained_share"] or 0) < 0.5, said(e)
    else:
        # the rest of the change is mostly the main thread's own work in the fsync cycle (on CPU,
        # 2.6 ms of 11 once), which a GET waits through too: fsync alone is >= 0.7, as check 09
        # holds it (which also holds the server's parts together to 0.85-1.15 at --repeat 3; at
        # 2 runs a side they came to 1.16 once)
        assert 0.7 <= e["explained_share"] <= 1.2 and e["leading_component"] == "fsync", said(e)
        # against an independent truth, the injected delay: a repeat's fsync component is k
        # fsyncs of 4 ms each plus this disk's own fdatasync (measured now, idle) or, under the
        # load, at most a call's mean length as the syscall tracepoints timed it (the component is
        # the main thread's blocked time, from its switches: a call's block can't outlast the call;
        # the disk's own share ran 0.9 ms under load against 0.2 ms idle here); a quick one's none
        own_p50, own_max = disk_fdatasync_us()
        per = [u["request_iterations"]["k"] * (0 if q else 1) for u, q in zip(used, quick)]
        k = sum(per) / len(per)
        call = next(t for t in base_cell(doc)["server"]["threads"] if t["role"] == "main")["fdatasync"]
        per_call = max(4000 + max(2 * own_p50, own_max), 1000 * call["total_ms"] / call["count"])
        assert k * 4000 <= fsync["base_us"] <= k * (per_call + 300), (k, fsync, own_p50, call)
    # the baseline's what-if (the pipeline model), checked against the everysec candidate: the fsync off
    # the main thread at most once a second, SETs acknowledged before it
    wi = [w for w in doc["compare"]["whatif"] if w["metric"] == "p50_us"]
    assert wi and wi[0]["scenario"] == "fsync_off_main_thread_early_ack"
    # within a factor of two of the measured, the suite's bound on a model's point (test_predict.judge): the
    # fitted read/reply split of a GET's CPU is bimodal here (0.5 or 0.7, the recorded p50 near both), which
    # moved this prediction between 199 and 254 µs for 167-171 µs measured in two runs of this fixture
    # (2026-12-05); check 22 holds the model to 15% on its own configurations
    assert 0.5 <= wi[0]["predicted"] / wi[0]["measured"] <= 2.0, wi[0]
    assert wi[0]["inputs"]["model"] == "pipeline" and wi[0]["inputs"]["change"]["job_interval_us"] == 1e6
    assert wi[0]["inputs"]["calibration"]["server_us_per_get"]["value"] > 0 and wi[0]["inputs"]["get_clients"] == 50


def _main(doc, label):
    cell = next(r for r in doc["runs"] if r["label"] == label)["cells"][0]
    return cell["server"], next(t for t in cell["server"]["threads"] if t["role"] == "main")


def _steal_ms(path):
    """The hypervisor's steal on the server's CPUs over a recording's windows (/proc/stat): in the
    switches' on-CPU time, not in schedstat's (PARAVIRT_TIME_ACCOUNTING; 6% of CPU 0 here, 128 ms of
    a 2.9 s main thread once in CI)."""
    from valkeytrace.analysis.server import server_steal_ns

    doc = recfmt.read(path)
    return sum(server_steal_ns(doc, r) or 0.0 for r in doc["runs"] if r["status"] == "ok") / 1e6


def test_a_busy_loop_on_the_servers_cpu_is_the_main_threads_wait_for_a_cpu(recs, tmp_path):
    # the loop pinned where the server runs (record --client-cpus auto put it apart from the clients)
    placement = recfmt.read(recs["e"])["client"]["placement"]
    cpus = placement["server_cpus"]
    hog = subprocess.Popen(["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "-c",
                            "import time\nt = time.time() + 120\nwhile time.time() < t: pass"])
    try:
        busy = record(tmp_path / "busy.vtrace", "--repeat", "2", "--appendfsync", "everysec", "--no-demand-pass",
                      "--inject-fsync-delay", "4ms", "--label", "everysec-loop-on-server-cpu")
    finally:
        hog.kill()
        hog.wait()
    doc = report_json(recs["e"], busy)
    e = get_p50(doc)
    fsync = next(c for c in e["components"] if c["name"] == "fsync")
    assert fsync["base_us"] == 0 and fsync["cand_us"] == 0  # neither main thread fsyncs
    assert e["explained_share"] is None or abs(e["explained_share"]) <= 0.1, said(e)
    # the independent truth: the kernel's own run-queue and on-CPU accounting of the main thread
    # (/proc schedstat) against the probes' (sched_switch + sched_wakeup), on both sides
    for label, path in (("fsync-everysec", recs["e"]), ("everysec-loop-on-server-cpu", busy)):
        srv, main = _main(doc, label)
        ss, wall = main["schedstat"], srv["main_thread"]["wall_ms"]
        wait, on = main["off_cpu_ms_by_state"].get("runnable", 0.0), wall - main["off_cpu_ms"]
        assert abs(wait - ss["runqueue_ms"]) <= max(0.10 * ss["runqueue_ms"], 0.01 * wall), (label, wait, ss)
        tol = max(0.05 * ss["on_cpu_ms"], 0.01 * wall)
        assert -tol <= on - ss["on_cpu_ms"] <= tol + _steal_ms(path), (label, on, ss, _steal_ms(path))
    base = _main(doc, "fsync-everysec")[0]["main_thread"]["waiting_for_cpu_pct"]
    loop = _main(doc, "everysec-loop-on-server-cpu")[0]["main_thread"]["waiting_for_cpu_pct"]
    assert loop - base >= 10, (base, loop)  # schedstat says the same, checked above
    # the claim: the main thread's wait for a CPU, the leading component when the p50 moved
    wait = next(c for c in e["components"] if c["name"] == "cpu_wait")
    if e["significant"]:
        # GET p50 moves +16% to +20% at these settings (1.5 s runs): the main thread's wait for a CPU
        # leads in some (+23 of +32 µs) and follows what stays outside the server in others (+9 and
        # +18 of +32 µs in CI); it is always there, named, and moving with the change
        assert e["leading_component"] in ("cpu_wait", "outside_server") and wait["delta_us"] > 0, said(e)
    # GET TPS fell 10% or more in most CI runs, and +1% in stop 34's (the clients, on the other CPU,
    # set the pace while the main thread still had the CPU it needed): not a truth to assert. What
    # the report says of it must match the table's own test
    row = next(r for r in doc["compare"]["rows"] if r["op"] == "GET")
    if not e["significant"]:
        tps_moved = not row["within_noise"]["tps"]
        assert ("throughput_moved" in [n["code"] for n in e["notes"]]) == tps_moved, (row, said(e))
    # the loop is in the window's CPU accounting, whatever the latency did
    runs = [r for r in recfmt.read(busy)["runs"] if r["status"] == "ok"]
    # (the loop gets ~0.5 of the server's CPU: 0.53-0.56 other cores here, 0.05 without it; the host's
    # busy time sampled at the tick had it at 0.06-0.41, and below 0.1 in a CI)
    assert all(r["host_cpu"]["other_cores"] >= 0.3 for r in runs), [r["host_cpu"] for r in runs]
    quiet = [r["host_cpu"]["other_cores"] for r in recfmt.read(recs["e"])["runs"] if r["status"] == "ok"]
    assert max(quiet) <= 0.2, quiet
    for r in runs:
        w = r["host_cpu"]["clients_cpu_wait"]
        assert 0 <= w["measured"] <= 1 and 0 <= w["background"] <= 1, r["host_cpu"]


def _slope(path, role=None, metric="p50_us"):
    doc = report_json(path)
    ss = [s for s in doc["runs"][0]["sensitivity"] if s["op"] == "GET" and s["metric"] == metric
          and (role is None or s["thread_role"] == role)]
    assert ss, doc["runs"][0]["sensitivity"]
    return ss[0], doc


def test_fsync_sensitivity_moves_get_under_always_not_everysec(tmp_path):
    # one repeat, yet each added delay is the median of 3 runs (recorder.SENSITIVITY_MIN_RUNS): at one
    # run per level the p50 at +2 ms sometimes takes the longer path (2 fsync cycles where 0 and
    # +4 ms take 1: R² 0.77-0.85 in CI and check 09), a real mode of the server
    always = record(tmp_path / "sa.vtrace", "--repeat", "1", "--appendfsync", "always", "--fsync-sensitivity", "2ms,4ms",
                    "--no-demand-pass")
    s, doc = _slope(always, "main")
    # the mean cannot change path (Little's law): its slope must hold; the p50's, whenever no
    # level's median run lay on the quick path (GET-only rounds, no fsync: p50 far under the mean)
    m, _ = _slope(always, "main", "mean_us")
    assert 0.5 <= m["slope"] <= 3.0 and m["r2"] >= 0.9, m
    if all(p[1] >= 0.5 * q[1] for p, q in zip(s["points"], m["points"])):
        # a level's median run can still sit between the paths of 1 and 2 cycles (R² 0.87 once,
        # slope 1.11): the p50 is held to the report's own reliability bar (verdict.reliable)
        assert 0.5 <= s["slope"] <= 3.0 and s["r2"] >= 0.8, (s, m)
    assert [p[0] for p in s["points"]] == sorted(p[0] for p in s["points"])  # measured fsync grows with the delay
    assert s["points"][-1][0] > 4000  # +4 ms is in the measured main-thread fsync
    assert s["runs_per_point"] == [1, 3, 3], s
    assert doc["runs"][0]["cells"][0]["repeats"] == 1  # the intervention runs stay out of the tables
    # everysec's GET waits for no fsync on any path: one run a level shows the flat slope
    everysec = record(tmp_path / "se.vtrace", "--repeat", "1", "--appendfsync", "everysec", "--fsync-sensitivity", "2ms,4ms",
                      "--sensitivity-runs", "1", "--no-demand-pass", "--duration", "1.5")  # a window of 1 s missed everysec's fsync (~1.0-1.1 s apart) once in CI: no slope
    s, _ = _slope(everysec)
    assert s["thread_role"] == "bio_aof" and abs(s["slope"]) < 0.2, s


@pytest.mark.parametrize("backend", ["shim"])  # eBPF timing the shim's wrappers: every eBPF test with a delay
def test_fsync_sensitivity_under_the_other_backends(tmp_path, backend):
    # the added delay must be in the measured fsync time whichever backend times it (with both,
    # eBPF times the shim's wrappers, as with --inject-fsync-delay)
    path = record(tmp_path / "s.vtrace", "--repeat", "1", "--appendfsync", "always", "--fsync-sensitivity", "2ms,4ms",
                  "--backend", backend, "--duration", "1", "--sensitivity-runs", "1")  # ~150 fsyncs a run at +4 ms
    s, _ = _slope(path, "main", "mean_us")  # the mean: a p50 level can sit on the quick path (above)
    assert 0.5 <= s["slope"] <= 3.0 and s["points"][-1][0] > 4000, s
