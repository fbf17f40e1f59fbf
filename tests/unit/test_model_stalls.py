"""The main thread's stalls weighed as requests meet them (analysis/model.py), on windows whose
answer is known: short regular stalls against rare long ones of the same total, a side with two
main-thread fsyncs in 2 s, and the repeats of one side on two paths of the server."""
import pytest

from valkeytrace.analysis import explain, model
from valkeytrace.analysis.server import summarize_server
from valkeytrace.analysis.tables import Meet, compare, summarize

WALL_NS = 2_000_000_000
PID = 100


def window(iterations, runnable_ns, stalls=(), main_fsyncs=0, fsync_us=0.0):
    """A main thread waiting for a CPU runnable_ns in all, of which `stalls` (ns each) are long
    enough for the blocked timeline; main_fsyncs fdatasyncs of fsync_us (in the timeline too)."""
    from valkeytrace.histogram import LatencyHistogram
    import numpy as np

    off = {"other": {"runnable": runnable_ns}}
    calls, events, t = {}, [], 1000
    for w in stalls:
        events.append([t, w, PID, "other", "runnable"])
        t += w + 1_000_000
    if main_fsyncs:
        off["fdatasync"] = {"io": main_fsyncs * fsync_us * 1000}
        calls["fdatasync"] = dict(LatencyHistogram.from_values(np.array([fsync_us * 1000] * main_fsyncs,
                                                                        dtype=np.uint64)).to_dict(), bytes=0)
        for _ in range(main_fsyncs):
            events.append([t, int(fsync_us * 1000), PID, "fdatasync", "io"])
            t += int(fsync_us * 1000) + 1_000_000
    return {"backend": "ebpf", "window_ns": WALL_NS, "pid": PID, "main_tid": PID,
            "threads": [{"tid": PID, "name": "valkey-server", "role": "main", "calls": calls, "off_cpu_ns": off}],
            "lost_events": 0, "blocked_timeline": {"threshold_ns": 100_000, "events": events}, "probe": {},
            "eventloop": {"source": "INFO", "cycles": iterations, "duration_us": WALL_NS / 1000}}


# a client distribution: 90% of requests within 0.1-0.3 ms, evenly, the rest up to 10 ms
CDF = [(100.0, 0.0), (300.0, 90.0), (10_000.0, 100.0)]
MEET = Meet(clients=50, tps=50_000.0, cdf=CDF)  # 100,000 requests in the 2 s window


def comps(win, k=2.0, meet=MEET):
    return model.server_residence(summarize_server([win]), k, meet).components


def test_rare_long_stalls_weigh_as_the_median_request_meets_them():
    total = 200_000_000  # 10% of the wall waiting for a CPU, either way
    # short and regular: 20,000 waits of 10 µs, none in the timeline: spread over the iterations
    short = comps(window(40_000, total))
    assert short["cpu_wait"] == pytest.approx(2 * total / 1000 / 40_000)  # 10 µs
    # rare and long: 20 waits of 10 ms. Each holds the 50 clients' requests: 1% of the requests
    # met one (50 x 20 / 100,000), above the median, which moves up the quick requests from their
    # own median (the 49.5th percentile) to the 50th: 300 - 100) / 90 x 0.5 = 1.1 µs
    long_ = comps(window(40_000, total, stalls=[10_000_000] * 20))
    assert long_["cpu_wait"] == pytest.approx(200 / 90 * 0.5, rel=1e-3)
    # the mean they cost is Little's: 50 clients x 200 ms / 100,000 requests = 100 µs, not the median's
    res = model.server_residence(summarize_server([window(40_000, total, stalls=[10_000_000] * 20)]), 2.0, MEET)
    assert res.inputs["stalls_met_share"] == pytest.approx(0.01)
    # when most requests meet one (a loop taking the CPU in slices), the median request waits one out
    many = comps(window(40_000, total, stalls=[2_000_000] * 100), meet=Meet(50, 2_000.0, CDF))  # 4,000 requests
    assert many["cpu_wait"] == pytest.approx(2000.0, rel=1e-3)  # W, the stalls' mean


def test_without_a_distribution_the_stalls_are_spread_as_before():
    total = 200_000_000
    spread = comps(window(40_000, total, stalls=[10_000_000] * 20), meet=None)
    assert spread["cpu_wait"] == pytest.approx(2 * total / 1000 / 40_000)


def test_two_main_thread_fsyncs_in_two_seconds_are_stalls_not_the_cycle():
    # everysec, an AOF opened in the window: two 5 ms fdatasyncs on the main thread
    win = window(100_000, 20_000_000, main_fsyncs=2, fsync_us=5000)
    srv = summarize_server([win])
    cyc = model.loop_cycle(srv)
    assert cyc.unit == "iteration" and cyc.units == 100_000  # not "0.00 fsync cycles of 909 ms"
    c = model.server_residence(srv, 2.0, MEET).components
    # 2 x 50 / 100,000 = 0.1% of requests met one: a fraction of a µs of the median's latency
    assert 0 <= c["fsync"] < 1.0
    # no component exceeds what its own measured time allows per request
    assert c["fsync"] <= 2 * 5000 and c["cpu_wait"] <= 2 * 20_000_000 / 1000 / 100_000 + 1


def test_regular_fsyncs_stay_the_cycle():
    win = window(469, 20_000_000, main_fsyncs=383, fsync_us=4613)
    cyc = model.loop_cycle(summarize_server([win]))
    assert cyc.unit == "fsync cycle" and cyc.units == 383
    c = model.server_residence(summarize_server([win]), 1.0, MEET).components
    assert c["fsync"] == pytest.approx(4613, rel=1e-3)  # the whole fsync, in every unit


def _doc(label, p50s, unit_fsync_us=4613, main_fsyncs=383):
    runs = []
    for i, p50 in enumerate(p50s):
        win = window(469, 20_000_000, main_fsyncs=main_fsyncs, fsync_us=unit_fsync_us)
        progress = [[0.25 * k, 50 / (p50 / 1e6), p50 / 1000 * (1 + 0.01 * (k % 3 - 1))] for k in range(9)]
        runs.append({"workload": "read-heavy", "value_size": 64, "repeat": i + 1, "status": "ok",
                     "ops": {"GET": {"role": "measured", "clients": 50, "tps": 50 / (p50 / 1e6), "p50_us": p50,
                                     "p95_us": p50 * 1.1, "p99_us": p50 * 1.3, "mean_us": p50, "progress": progress}},
                     "server": win})
    return {"format": "valkeytrace-recording", "version": 2, "label": label, "server": {"appendfsync": "always"},
            "settings": {}, "runs": runs, "complete": True}


def test_repeats_on_different_paths_are_no_basis_for_significance():
    # the CI failure's shape: a baseline with repeats at 1.2 and 1.8 fsync cycles (6.45, 9.58 ms),
    # a candidate on the shorter path (6.1 ms, twice): -24%, disjoint ranges, yet an A/A pair
    base, cand = _doc("a1", [6450, 9580]), _doc("a2", [6100, 6150])
    b, c = summarize(base), summarize(cand)
    assert b[0].ops["GET"].split and not c[0].ops["GET"].split
    entries = explain.explain_compare(b, c, compare(b, c), base, cand)
    e = next(e for e in entries if e.metric == "p50_us")
    assert e.significant is False and e.explained_share is None, e.claim
    assert e.note("significance.paths").figures["paths"][0] == [1.24, 1.83], e.codes()


def test_one_launch_a_side_on_different_paths_is_no_basis_either():
    # stop 34's CI: a1's repeats at 1.07 and 1.46 cycles, a2's at 1.75 and 1.73 (the next launch's
    # path), +38% with every repeat of one side beyond every repeat of the other: an A/A pair
    base, cand = _doc("a1", [9450, 9580]), _doc("a2", [6100, 6150])
    b, c = summarize(base), summarize(cand)
    assert not b[0].ops["GET"].split and not c[0].ops["GET"].split
    e = explain.explain_compare(b, c, compare(b, c), base, cand)[0]
    assert e.significant is False and e.explained_share is None, e.claim
    assert "significance.paths" in e.codes(), e.codes()
    # the same path on both sides, a longer cycle on one: the change is the cycle's, significant
    same = _doc("slow", [10_950, 11_100], unit_fsync_us=5613, main_fsyncs=340)
    s = summarize(same)
    assert abs(s[0].ops["GET"].paths[0] - b[0].ops["GET"].paths[0]) < 0.1, (s[0].ops["GET"].paths, b[0].ops["GET"].paths)
    assert explain.explain_compare(b, s, compare(b, s), base, same)[0].significant is True
    # different paths, but beyond the paths' reach (cycles of 5.2 ms against 13 ms): significant
    far = _doc("far", [22_000, 22_300], unit_fsync_us=12_000, main_fsyncs=150)
    f = summarize(far)
    e = explain.explain_compare(c, f, compare(c, f), cand, far)[0]
    assert e.significant is True, e.claim


def test_a_median_answered_within_a_fraction_of_a_cycle_waited_no_fsync():
    # always +4 ms: a 5.2 ms fsync cycle, but the median GET at 300 µs (iterations that executed no
    # write answered it): no fsync in its latency, not 0.06 of a cycle's fsync
    srv = summarize_server([window(469, 20_000_000, main_fsyncs=383, fsync_us=4613)])
    it = model.request_iterations(srv, 3700.0, 2.0, 300.0)
    assert it.quick and it.k == 2.0
    res = model.decompose(300.0, srv, it.k, None, it.quick)
    assert res.components["fsync"] == 0
    busy_per_iteration = (WALL_NS / 1000 - 383 * 4613) / 469
    assert sum(v for c, v in res.components.items() if c != "outside_server") == pytest.approx(2 * busy_per_iteration)


def test_a_split_side_still_shows_a_change_beyond_all_its_repeats():
    # a baseline with one repeat on each path (1 cycle and the quick one) against a candidate
    # below both by far: the change is beyond every repeat, significant
    base = _doc("always", [4551, 383])
    cand = _doc("everysec", [200, 210], main_fsyncs=0)  # its main thread does not fsync
    b, c = summarize(base), summarize(cand)
    assert b[0].ops["GET"].split
    e = explain.explain_compare(b, c, compare(b, c), base, cand)[0]
    assert e.significant is True, e.claim
