"""The verdict as data, on synthetic recordings whose answer is known (the builders of
test_explain): an fsync-led change, no change, a slope stated only when its fit is reliable, and a
what-if judged against its tolerance."""
from test_explain import recording, window

from valkeytrace.analysis import explain, sensitivity, verdict, whatif
from valkeytrace.analysis.tables import compare, summarize
from valkeytrace.reporters.sections import describe_slopes


def _verdicts(base_doc, cand_doc):
    b, c = summarize(base_doc), summarize(cand_doc)
    cmp = compare(b, c)
    entries = explain.explain_compare(b, c, cmp, base_doc, cand_doc)
    return verdict.build(cmp, entries, [], []), entries


def test_an_fsync_led_change_is_significant_and_led_by_fsync():
    base = recording("always", [(window(500, main_fsyncs=400, fsync_us=4000, cpu_wait=0.01), [4300, 4400, 4350], {})])
    cand = recording("everysec", [(window(40000, bio_fsyncs=2, cpu_wait=0.01), [200, 210, 205], {})],
                     appendfsync="everysec")
    vs, entries = _verdicts(base, cand)
    by = {v.metric: v for v in vs}
    assert set(by) == {"p50_us", "p99_us", "mean_us", "tps"}
    p50 = by["p50_us"]
    assert p50.significant is True and p50.change_pct < -90
    assert p50.leading_component == "fsync" and p50.leading_label == "main thread blocked in fsync"
    assert 0.7 <= p50.explained_share <= 1.3
    assert p50.n == [3, 3] and (p50.rule.code, p50.rule.min_effect) == ("rule.repeats", 0.15)
    (f,) = [f for f in verdict.findings(vs, entries) if f.kind == "fsync"]
    assert f.cells == ["read-heavy GET 64 B"]
    assert [s.code for s in f.sides][:2] == ["side.where", "side.where"]  # the servers' own facts, not the model
    assert f.sides[0].placements[0].role == "main" and f.sides[0].blocked_in_fsync_pct > 50


def test_no_change_is_not_significant_and_has_no_cause():
    base = recording("a", [(window(500, main_fsyncs=400, fsync_us=4000), [4300, 4400, 4350], {})])
    cand = recording("b", [(window(500, main_fsyncs=400, fsync_us=4000), [4350, 4310, 4420], {})])
    vs, entries = _verdicts(base, cand)
    p50 = next(v for v in vs if v.metric == "p50_us")
    assert p50.significant is False and p50.leading_component is None and p50.explained_share is None
    assert [f.kind for f in verdict.findings(vs, entries)] == ["no_change"]


def test_one_repeat_a_side_is_unknown():
    base = recording("a", [(window(500, main_fsyncs=400, fsync_us=4000), [4300], {})], repeats=1)
    cand = recording("b", [(window(40000, bio_fsyncs=2), [200], {})], appendfsync="everysec", repeats=1)
    vs, _ = _verdicts(base, cand)
    p50 = next(v for v in vs if v.metric == "p50_us")
    assert p50.significant is None and p50.rule.code == "rule.unknown"


def test_reliable_needs_a_good_fit_and_monotonic_points():
    assert verdict.reliable([[100, 1000], [2000, 3000], [4000, 5100]], 0.99)
    # the case: 6.44 -> 13.88 -> 10.22 ms, R² 0.24
    assert not verdict.reliable([[100, 6440], [2000, 13880], [4000, 10220]], 0.24)
    # a good R² over points that turn back is not a slope either
    assert not verdict.reliable([[0, 1000], [1000, 2000], [2000, 1990], [3000, 4000]], 0.85)
    assert not verdict.reliable([[0, 1], [1, 2]], 1.0)  # two points


def test_an_unreliable_slope_is_not_stated():
    e = sensitivity.Slope("read-heavy", "GET", 1024, "p50_us", "main", slope=0.89, slope_stderr=0.5, intercept_us=0.0,
                          r2=0.24, points=[[100, 6440], [2100, 13880], [4100, 10220]], reliable=False,
                          runs_per_point=[1, 1, 1], point_delays_ns=[0, 2e6, 4e6], added_delays_ns=[0, 2_000_000, 4_000_000])
    (line,) = describe_slopes([e])
    assert "not measured reliably" in line and "0.89" not in line and "6.44 -> 13.88 -> 10.22 ms" in line


def test_the_candidates_configuration_as_a_change_of_the_baselines():
    def doc(emulation=None, **server):
        return {"format": "valkeytrace-recording", "version": 2, "label": "x", "runs": [],
                "server": {"appendfsync": "always", "io_threads": 1, **server}, "emulation": emulation,
                "settings": {"get_clients": 50, "set_clients": 8, "write_clients": 50}}
    base = doc({"fsync_delay": {"median_ns": 4e6, "sigma": 0.0}})
    gathered = doc({"fsync_delay": {"median_ns": 4e6, "sigma": 0.0}, "offload": {"mode": "durable", "gather_ns": 1e6}})
    change, scenario = whatif.change_between(base, gathered)
    assert (change.offload, change.gather_us, change.fsync_delay) == ("durable", 1000.0, None)
    assert scenario == "fsync_off_main_thread+gather_window"
    slower = doc({"fsync_delay": {"median_ns": 6e6, "sigma": 0.0}})
    change, scenario = whatif.change_between(base, slower)
    assert change.offload is None and change.fsync_delay.median_ns == 6e6 and scenario == "fsync_delay"
    change, _ = whatif.change_between(base, doc(None, appendfsync="everysec"))
    assert change.offload == "early-ack" and change.job_interval_us == 1e6
    # what the model does not change, and an A/A pair: nothing predicted, and said why
    change, scenario = whatif.change_between(base, doc(base["emulation"], io_threads=2))
    assert change.io_threads == 2 and change.offload is None and scenario == "io_threads"
    four = doc(base["emulation"], io_threads=4)
    for b, other, why in ((base, four, "io_threads_beyond_model"), (four, base, "io_threads_beyond_model"),
                          (base, base, "same_configuration")):  # a baseline beyond the model too (review, 2026-12-07)
        change, reason = whatif.change_between(b, other)
        assert change is None and reason == why
    assert whatif.TOLERANCE_PCT == {"tps": 15.0, "p50_us": 15.0, "p95_us": 40.0, "p99_us": 40.0}

