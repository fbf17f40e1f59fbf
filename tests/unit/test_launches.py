"""Significance from launches (analysis/launches.py), on figures whose answer is known: launches
drawn from one distribution (A/A) are not a change, a shift beyond the launch spread is, a split
side (one fsync cycle or two) needs more launches, and the rule is used only from 3 launches."""
import numpy as np

from valkeytrace.analysis import launches


def test_launch_figures_summarise_each_launch_first():
    rows = [(1, 10.0), (1, 30.0), (2, 5.0), (None, 99.0), (3, None)]
    assert launches.launch_figures(rows) == [20.0, 5.0]
    assert launches.launch_figures([(None, 1.0)]) == []


def test_below_three_launches_a_side_there_is_no_interval():
    assert launches.interval([1.0, 2.0], [1.0, 2.0, 3.0]) is None


def test_aa_launches_from_one_distribution_are_rarely_significant():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(200):
        x = rng.normal(5000, 250, 8)
        iv = launches.interval(list(x[:4]), list(x[4:]))
        assert iv.interval_pct[0] <= iv.change_pct <= iv.interval_pct[1]
        hits += iv.significant
    # the nominal 5% (a percentile bootstrap gave 16% on these pairs)
    assert hits / 200 <= 0.08, hits


def test_a_shift_beyond_the_launch_spread_is_found_with_its_size():
    base = [5000, 5200, 4900, 5100]
    cand = [6000, 6150, 5900, 6100]  # +20%
    iv = launches.interval(base, cand)
    assert iv.significant and iv.interval_pct[0] > 10 and iv.interval_pct[0] <= iv.change_pct <= iv.interval_pct[1]
    geo = lambda x: np.exp(np.mean(np.log(x)))  # noqa: E731
    assert abs(iv.change_pct - 100 * (geo(cand) / geo(base) - 1)) < 0.01
    assert iv.launches == [4, 4]


def test_a_split_side_is_not_a_change_and_says_how_many_launches_it_would_take():
    base = [5000, 9800, 5100, 9600]  # one fsync cycle per request in some launches, two in others
    cand = [5200, 5300, 9900, 5100]
    iv = launches.interval(base, cand)
    assert not iv.significant and iv.interval_pct[0] < 0 < iv.interval_pct[1]
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


def test_the_interval_is_welchs_computed_by_hand():
    """scipy's Welch interval against the textbook formula (Welch-Satterthwaite df, t quantile)."""
    from scipy.stats import t as student

    base, cand = [10.0, 10.8, 9.6, 10.3], [7.1, 7.9, 6.6]
    lb, lc = np.log(base), np.log(cand)
    vb, vc = lb.var(ddof=1) / len(lb), lc.var(ddof=1) / len(lc)
    df = (vb + vc) ** 2 / (vb ** 2 / (len(lb) - 1) + vc ** 2 / (len(lc) - 1))
    d, half = lc.mean() - lb.mean(), student.ppf(0.975, df) * np.sqrt(vb + vc)
    iv = launches.interval(base, cand)
    assert iv.interval_pct == [round(100 * (np.exp(d - half) - 1), 2), round(100 * (np.exp(d + half) - 1), 2)]
    assert iv.significant and iv.launches == [4, 3]
    same = launches.interval([5.0] * 3, [5.0] * 3)  # no spread: no interval to speak of, no change
    assert same.interval_pct == [0.0, 0.0] and not same.significant


def test_the_slope_and_its_standard_error_are_least_squares():
    """The sensitivity line against the closed form: slope Sxy/Sxx, stderr sqrt(SSE/(n-2)/Sxx)."""
    from valkeytrace.analysis.sensitivity import fit

    x = np.array([0.0, 2000.0, 4000.0, 6000.0])
    y = 2.1 * x + 9000.0 + np.array([150.0, -90.0, 40.0, -100.0])
    sxx = ((x - x.mean()) ** 2).sum()
    slope = ((x - x.mean()) * (y - y.mean())).sum() / sxx
    sse = ((y - (y.mean() + slope * (x - x.mean()))) ** 2).sum()
    f = fit(list(zip(x, y)))
    assert f.slope == round(slope, 4) and f.slope_stderr == round(float(np.sqrt(sse / 2 / sxx)), 4)
    assert f.r2 == round(1 - sse / ((y - y.mean()) ** 2).sum(), 4)
    assert fit([(0, 5.0), (1, 5.0), (2, 5.0)]).r2 == 0.0
