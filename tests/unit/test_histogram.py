"""The C log-linear histogram against numpy's exact percentiles."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from valkeytrace.histogram import LatencyHistogram
from valkeytrace.layout import HIST_BUCKETS

PCTS = [0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100]
MAX_REL_ERR = 0.01


def exact(values, pcts):
    return np.percentile(values, pcts, method="inverted_cdf")


def assert_close(hist, values, pcts=PCTS):
    got = hist.percentiles(pcts)
    want = exact(values, pcts)
    rel = np.abs(got - want) / np.maximum(want, 1)
    assert rel.max() <= MAX_REL_ERR, list(zip(pcts, got, want))


@pytest.mark.parametrize("dist", ["lognormal", "uniform", "exponential", "bimodal"])
def test_random_distributions_within_one_percent(dist):
    # GIVEN a million latencies from a distribution spanning microseconds to tens of ms
    rng = np.random.default_rng(42)
    n = 1_000_000
    values = {
        "lognormal": rng.lognormal(mean=np.log(300_000), sigma=1.0, size=n),
        "uniform": rng.uniform(1_000, 20_000_000, size=n),
        "exponential": rng.exponential(4_000_000, size=n),
        "bimodal": np.concatenate([rng.normal(350_000, 20_000, n // 2), rng.normal(10_000_000, 500_000, n // 2)]),
    }[dist].clip(0).astype(np.uint64)
    # WHEN recorded in one call
    hist = LatencyHistogram.from_values(values)
    # THEN every percentile is within 1% of numpy's exact inverted-CDF value
    assert hist.count == n
    assert hist.sum_ns == int(values.sum())
    assert hist.min_ns == int(values.min()) and hist.max_ns == int(values.max())
    assert_close(hist, values)


def test_single_value_is_exact():
    hist = LatencyHistogram.from_values(np.array([4_123_456], dtype=np.uint64))
    assert list(hist.percentiles([0, 50, 100])) == [4_123_456.0] * 3


def test_small_values_are_exact():
    values = np.arange(0, 128, dtype=np.uint64)
    hist = LatencyHistogram.from_values(values)
    np.testing.assert_array_equal(hist.percentiles(PCTS), exact(values, PCTS))


def test_huge_range_and_overflow_bucket():
    # 1 ns .. 2^50 ns: values past the top (2^40 ns) share the last bucket, clamped to max
    values = np.array([1, 1000, 10**6, 10**9, 10**12, 2**50], dtype=np.uint64)
    hist = LatencyHistogram.from_values(values)
    got = hist.percentiles([0, 50, 100])
    assert got[0] == 1 and got[2] == 2**50
    assert abs(got[1] - 10**6) / 10**6 <= MAX_REL_ERR


def test_empty_histogram_gives_nan_not_garbage():
    hist = LatencyHistogram()
    assert hist.count == 0
    assert np.isnan(hist.percentiles([50])).all()


def test_out_of_range_percentile_is_rejected():
    hist = LatencyHistogram.from_values(np.array([5], dtype=np.uint64))
    with pytest.raises(ValueError):
        hist.percentiles([101])


def test_merge_equals_recording_everything_at_once():
    rng = np.random.default_rng(1)
    a = rng.integers(1, 10**8, 5000, dtype=np.uint64)
    b = rng.integers(1, 10**5, 7000, dtype=np.uint64)
    merged = LatencyHistogram.from_values(a).merge(LatencyHistogram.from_values(b))
    whole = LatencyHistogram.from_values(np.concatenate([a, b]))
    np.testing.assert_array_equal(merged.bucket_counts, whole.bucket_counts)
    assert (merged.count, merged.sum_ns, merged.min_ns, merged.max_ns) == \
           (whole.count, whole.sum_ns, whole.min_ns, whole.max_ns)


def test_sparse_roundtrip_preserves_everything():
    rng = np.random.default_rng(2)
    values = rng.integers(100, 10**9, 20000, dtype=np.uint64)
    hist = LatencyHistogram.from_values(values)
    back = LatencyHistogram.from_dict(hist.to_dict())
    np.testing.assert_array_equal(back.bucket_counts, hist.bucket_counts)
    assert back.to_dict() == hist.to_dict()


def test_from_bucket_counts_rejects_bad_index():
    with pytest.raises(ValueError):
        LatencyHistogram.from_bucket_counts({HIST_BUCKETS: 1})


def test_bucket_bounds_tile_the_range_with_bounded_width():
    bounds = LatencyHistogram.bucket_bounds().astype(np.float64)
    assert bounds[0, 0] == 0
    np.testing.assert_array_equal(bounds[1:, 0], bounds[:-1, 1])  # contiguous, no gaps
    width = bounds[:, 1] - bounds[:, 0]
    assert (width[128:] / bounds[128:, 0]).max() <= 1 / 64


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**40 - 1), min_size=1, max_size=300),
       st.floats(min_value=0, max_value=100))
def test_any_sample_any_percentile_within_one_percent(values, pct):
    arr = np.array(values, dtype=np.uint64)
    hist = LatencyHistogram.from_values(arr)
    got = hist.percentile(pct)
    want = float(exact(arr, [pct])[0])
    assert abs(got - want) <= max(MAX_REL_ERR * want, 0.5)
