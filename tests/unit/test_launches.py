"""Significance from launches (analysis/launches.py), on figures whose answer is known: launches
drawn from one distribution (A/A) are not a change, a shift beyond the launch spread is, a split
side (one fsync cycle or two) needs more launches, and the rule is used only from 3 launches."""
import numpy as np

from valkeytrace.analysis import launches


def test_launch_figures_summarise_each_launch_first():
    rows = [{"_launch": 1, "p50_us": 10.0}, {"_launch": 1, "p50_us": 30.0}, {"_launch": 2, "p50_us": 5.0},
            {"_launch": None, "p50_us": 99.0}, {"_launch": 3, "p50_us": None}]
    assert launches.launch_figures(rows, "p50_us") == [20.0, 5.0]
    assert launches.launch_figures([{"p50_us": 1.0}], "p50_us") == []


def test_below_three_launches_a_side_there_is_no_interval():
    assert launches.interval([1.0, 2.0], [1.0, 2.0, 3.0]) is None


def test_aa_launches_from_one_distribution_are_rarely_significant():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(200):
        x = rng.normal(5000, 250, 8)
        iv = launches.interval(list(x[:4]), list(x[4:]))
        assert iv["interval_pct"][0] <= iv["change_pct"] <= iv["interval_pct"][1]
        hits += iv["significant"]
    # the nominal 5% (a percentile bootstrap gave 16% on these pairs)
    assert hits / 200 <= 0.08, hits


def test_a_shift_beyond_the_launch_spread_is_found_with_its_size():
    base = [5000, 5200, 4900, 5100]
    cand = [6000, 6150, 5900, 6100]  # +20%
    iv = launches.interval(base, cand)
    assert iv["significant"] and iv["interval_pct"][0] > 10 and iv["interval_pct"][0] <= iv["change_pct"] <= iv["interval_pct"][1]
    geo = lambda x: np.exp(np.mean(np.log(x)))  # noqa: E731
    assert abs(iv["change_pct"] - 100 * (geo(cand) / geo(base) - 1)) < 0.01
    assert iv["launches"] == [4, 4]


def test_a_split_side_is_not_a_change_and_says_how_many_launches_it_would_take():
    base = [5000, 9800, 5100, 9600]  # one fsync cycle per request in some launches, two in others
    cand = [5200, 5300, 9900, 5100]
    iv = launches.interval(base, cand)
    assert not iv["significant"] and iv["interval_pct"][0] < 0 < iv["interval_pct"][1]
    need = launches.launches_needed(base, cand)
    assert need is not None and need > 4


def test_launch_order_alternates_abba():
    from valkeytrace.cli.compare import launch_order

    order = "".join(s[0] for s, _ in launch_order(4))
    assert order == "bccbbccb" and "bbb" not in order and "ccc" not in order
    assert [k for _, k in launch_order(2)] == [1, 1, 2, 2]


def test_the_intervention_is_spread_over_the_launches():
    from valkeytrace.recorder import Settings

    common = dict(workloads=("read-heavy",), sizes=(64,), repeat=1, duration_s=1, keyspace=10, get_clients=1,
                  set_clients=1, write_clients=1, backend="none", sensitivity=(2_000_000,))
    alone = [m for m in Settings(**common).matrix() if m[3]]
    per_launch = [m for m in Settings(**common, sensitivity_runs=1).matrix() if m[3]]
    assert len(alone) == 3 and len(per_launch) == 1  # 3 launches of 1 make the level's 3 runs


def test_merged_launches_keep_every_run_tagged():
    from valkeytrace.recording.document import merge_launches

    docs = [(k, {"label": "x", "server": {"pid": 10 + k, "version": "9"}, "warnings": ["w"], "complete": k != 2,
                 "runs": [{"repeat": 1, "started_at": 100.0 * k}]}) for k in (1, 2, 3)]
    m = merge_launches(docs, "baseline")
    assert [r["launch"] for r in m["runs"]] == [1, 2, 3] and m["warnings"] == ["w"] and m["complete"] is False
    assert [x["pid"] for x in m["launches"]] == [11, 12, 13] and merge_launches([], "baseline") is None
    assert "launch" not in docs[0][1]["runs"][0]  # the launch's own document is left as it was
