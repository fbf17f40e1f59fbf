"""benchmarks/peers.py's statistics: the B/A ratio and its bootstrap interval over ABBA slices."""
import importlib.util
from pathlib import Path

import numpy as np

spec = importlib.util.spec_from_file_location("peers", Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peers)


def slices(a_vals, b_vals, per_group=2):
    out = []
    for i, (a, b) in enumerate(zip(a_vals, b_vals)):
        g = i // per_group
        out += [{"group": g, "traced": False, "get_tps": a, "get_p99_us": a, "server_cpu_ms_per_kget": a},
                {"group": g, "traced": True, "get_tps": b, "get_p99_us": b, "server_cpu_ms_per_kget": b}]
    return out


def test_a_known_cost_is_inside_the_interval_and_no_cost_outside():
    rng = np.random.default_rng(1)
    a = 30000 * (1 + 0.09 * rng.standard_normal(40))
    b = 0.95 * 30000 * (1 + 0.09 * rng.standard_normal(40))  # a 5% cost, the slices' 9% noise
    s = slices(a, b)
    lo, hi = peers.interval(s, "get_tps", np.random.default_rng(2))
    assert lo < 0.95 < hi and hi < 1.0
    assert abs(peers.ratio(s, "get_tps") - 0.95) < 0.04


def test_identical_sides_give_ratio_one_and_a_narrow_interval():
    s = slices([100.0] * 8, [100.0] * 8)
    assert peers.ratio(s, "get_tps") == 1.0
    assert peers.interval(s, "get_tps", np.random.default_rng(0)) == (1.0, 1.0)


def test_p99_without_distributions_is_the_median_slice():
    s = slices([100, 100, 100, 100], [100, 100, 100, 10000])  # one wild traced slice
    assert peers.ratio(s, "get_p99_us") == 1.0
    assert peers.ratio(s, "get_tps") > 20


def uniform_dist(hi_ms):
    """A percentile distribution of latencies uniform on [0, hi_ms]: [[percent, ms], ...]."""
    return [[p, hi_ms * p / 100] for p in (0, 50, 75, 87.5, 93.75, 99, 100)]


def test_pooled_p99_is_the_p99_of_all_requests():
    # untraced: two slices uniform on [0, 1] ms; traced: one on [0, 1], one on [0, 3] ms. Pooled
    # traced CDF at x >= 1 ms: (1 + x/3) / 2, which reaches 99% at x = 2.94 ms
    s = [{"group": 0, "traced": False, "get_p99_us": 990.0, "dist": uniform_dist(1.0)},
         {"group": 0, "traced": False, "get_p99_us": 990.0, "dist": uniform_dist(1.0)},
         {"group": 0, "traced": True, "get_p99_us": 990.0, "dist": uniform_dist(1.0)},
         {"group": 0, "traced": True, "get_p99_us": 2970.0, "dist": uniform_dist(3.0)}]
    assert abs(peers.side_value(s, "get_p99_us", False) - 990.0) < 1
    assert abs(peers.side_value(s, "get_p99_us", True) - 2940.0) < 1
    assert abs(peers.ratio(s, "get_p99_us") - 2940 / 990) < 0.01
