"""A predicted figure's interval (analysis/intervals.py) and the calibration's draws: pure logic against
figures whose answer is known, and the stored recording whose GET-only passes ran at two speeds
(tests/data/two-modes-baseline.vtrace: 19.9, 19.9 and 25.0 µs of CPU a request)."""
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from valkeytrace.analysis import calibration, intervals
from valkeytrace.recording import format as recfmt

DATA = Path(__file__).resolve().parent.parent / "data"
TWO_SPEEDS = DATA / "two-modes-baseline.vtrace"


def test_the_interval_of_a_median_of_repeats_covers_its_level():
    # windows log-normal around 100 with SD 0.1: a recording of 3 is their median; the interval drawn from
    # 2000 windows must hold about 90% of fresh medians (an independent draw, not the formula)
    rng = np.random.default_rng(1)
    windows = list(100 * np.exp(rng.normal(0, 0.1, 2000)))
    s = intervals.spread(windows, 3, 0.0, 0.0, np.random.default_rng(2))
    fresh = np.median(100 * np.exp(rng.normal(0, 0.1, (5000, 3))), axis=1)
    held = np.mean((fresh >= s.lo) & (fresh <= s.hi))
    assert 0.86 <= held <= 0.94, held
    assert s.lo < s.point < s.hi and s.point == pytest.approx(100, rel=0.03)


def test_more_repeats_narrow_it_and_a_shift_or_a_miss_widen_it():
    windows = list(100 * np.exp(np.random.default_rng(3).normal(0, 0.1, 100)))
    w = lambda s: s.hi / s.lo  # noqa: E731
    one, five = (intervals.spread(windows, r, 0, 0, np.random.default_rng(4)) for r in (1, 5))
    assert w(five) < w(one)
    shifted = intervals.spread(windows, 5, 0.1, 0, np.random.default_rng(4))
    missed = intervals.spread(windows, 5, 0, 0.1, np.random.default_rng(4))
    assert w(shifted) > w(five) and w(missed) > w(five)
    # a shift of SD 0.1 on its own: 90% of the log within +-1.645 SD
    flat = intervals.spread([100.0] * 10, 3, 0.1, 0, np.random.default_rng(5))
    assert np.log(flat.hi / flat.lo) == pytest.approx(2 * norm.ppf(0.95) * 0.1, rel=0.08)


def test_the_hosts_shift_is_widened_for_few_passes():
    three = [100.0, 110.0, 95.0]
    sd = float(np.std(np.log(three), ddof=1))
    assert intervals.shift_sd([three]) == pytest.approx(sd * 2.920 / 1.645, rel=1e-3)  # t(2) over the normal at 95%
    many = list(np.exp(np.random.default_rng(6).normal(0, 0.05, 200)))
    assert intervals.shift_sd([many]) == pytest.approx(float(np.std(np.log(many), ddof=1)), rel=0.02)
    assert intervals.shift_sd([[100.0]]) == 0.0 and intervals.shift_sd([]) == 0.0
    # groups pooled about their own means: a load at 10x another moves the same, and adds its degrees of freedom
    pooled = intervals.shift_sd([three, [10 * x for x in three]])
    assert pooled == pytest.approx(sd * 2.132 / 1.645, rel=1e-3)  # t(4)


def test_the_models_miss_is_the_log_ratio():
    assert intervals.model_sd(100.0, 110.0) == pytest.approx(np.log(1.1))
    assert intervals.model_sd(110.0, 100.0) == pytest.approx(np.log(1.1))
    assert intervals.model_sd(None, 100.0) == 0.0 and intervals.model_sd(100.0, 0.0) == 0.0


def test_a_figure_the_model_hit_exactly_takes_the_miss_of_the_others():
    # an exact p50 beside a 10% p95 and a 2% rate: one draw of the model's error is not its size
    misses = [np.log(1.02), 0.0, np.log(1.1), 0.0, 0.0]
    assert intervals.pooled_miss(misses) == pytest.approx(np.sqrt((np.log(1.02) ** 2 + np.log(1.1) ** 2) / 5))
    assert intervals.pooled_miss(misses) > 0.04 and intervals.pooled_miss([]) == 0.0


@pytest.fixture(scope="module")
def two_speeds():
    return recfmt.read(TWO_SPEEDS)


def test_each_simulated_window_draws_a_pass_of_its_own(two_speeds):
    cal = calibration.calibrate(two_speeds, "read-heavy", 64)
    totals = sorted(round(d.server.read_us["GET"] + d.server.write_us + d.client.read_us + d.client.write_us, 1)
                    for d in cal.draws)
    assert len(cal.draws) == 3 and totals[-1] / totals[0] > 1.2, totals  # the slow pass is one of the draws
    rng = np.random.default_rng(0)
    seen = {round(cal.variant(rng).server.write_us, 3) for _ in range(40)}
    assert len(seen) >= 2
    # nothing counted on another host: every input has a source from this recording, the fitted ones named
    assert {"cpu_split", "jitter_share"} <= set(cal.fitted)
    assert all(v.source for v in cal.inputs.values())
    assert not {"slow_mode_weight", "emulation_us_per_request"} & set(cal.inputs)
