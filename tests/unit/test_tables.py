"""Median/delta arithmetic and the markdown table, on the valkey#4029 seed table's own numbers."""
import io

import pytest

from valkeytrace.analysis.tables import compare, delta_pct, summarize
from valkeytrace.reporters import markdown
from valkeytrace.analysis.report import analyse

# (size, tps, p50, p95, p99) from the seed: read-heavy GET, baseline and bio-offload
SEED_BASE = [(64, 5450, 10263, 11039, 11623), (256, 5630, 10351, 11111, 11575), (1024, 5580, 10527, 11407, 11839)]
SEED_CAND = [(64, 70670, 359, 615, 695), (256, 71630, 359, 639, 727), (1024, 71280, 359, 671, 743)]
SEED_DELTA_LAT = {64: (-96.50, -94.43, -94.02), 256: (-96.53, -94.25, -93.72), 1024: (-96.59, -94.12, -93.72)}


def fake_recording(label, rows, jitter=(0.98, 1.0, 1.03)):
    """Three repeats per cell whose median is exactly the seed's number."""
    runs = []
    for size, tps, p50, p95, p99 in rows:
        for i, j in enumerate(jitter):
            runs.append({"workload": "read-heavy", "value_size": size, "repeat": i + 1, "status": "ok",
                         "ops": {"GET": {"role": "measured", "clients": 50, "tps": tps * j,
                                         "p50_us": p50 * j, "p95_us": p95 * j, "p99_us": p99 * j}}})
    return {"format": "valkeytrace-recording", "version": 1, "label": label, "complete": True,
            "server": {"appendfsync": "always", "version": "9.1.2"}, "settings": {"get_clients": 50, "set_clients": 8},
            "runs": runs}


def test_median_of_repeats_and_mb_s():
    cells = summarize(fake_recording("baseline", SEED_BASE))
    assert [c.value_size for c in cells] == [64, 256, 1024]
    get = cells[0].ops["GET"]
    assert get.n == 3 and get.median["tps"] == pytest.approx(5450)
    assert get.median["mb_s"] == pytest.approx(5450 * 64 / 1e6)  # 0.35 in the seed
    assert get.spread["p50_us"] == [pytest.approx(10263 * 0.98), pytest.approx(10263 * 1.03)]


def test_latency_deltas_reproduce_the_seed_delta_rows():
    cmp = compare(summarize(fake_recording("baseline", SEED_BASE)),
                  summarize(fake_recording("bio-offload", SEED_CAND)))
    for row in cmp.rows:
        want = SEED_DELTA_LAT[row.value_size]
        got = tuple(round(row.deltas[m], 2) for m in ("p50_us", "p95_us", "p99_us"))
        assert got == want
        assert row.deltas["tps"] == pytest.approx(row.deltas["mb_s"])
        assert not row.noise["p50_us"]  # ranges far apart: a real change
    # the seed's +1196.17% comes from unrounded TPS; from the rounded table values:
    assert delta_pct(5450, 70670) == pytest.approx(1196.70, abs=0.01)


def test_overlapping_ranges_are_within_noise():
    base = summarize(fake_recording("a", [(64, 1000, 100, 100, 100)], jitter=(0.9, 1.0, 1.1)))
    cand = summarize(fake_recording("b", [(64, 1050, 101, 101, 101)], jitter=(0.9, 1.0, 1.1)))
    row = compare(base, cand).rows[0]
    assert row.noise["tps"] and row.noise["p50_us"]


def test_cells_missing_on_one_side_are_named():
    base = summarize(fake_recording("a", SEED_BASE))
    cand = summarize(fake_recording("b", SEED_CAND[:1]))
    cmp = compare(base, cand, "a", "b")
    assert [r.value_size for r in cmp.rows] == [64]
    assert any("256" in m and "not in b" in m for m in cmp.missing)


def test_failed_runs_are_left_out_of_medians():
    doc = fake_recording("a", SEED_BASE[:1])
    doc["runs"][0]["status"] = "failed"
    cell = summarize(doc)[0]
    assert cell.repeats == 2 and cell.failed == 1


def test_markdown_reproduces_the_seed_table_shape():
    inp = analyse([("a.vtrace", fake_recording("baseline", SEED_BASE)),
                   ("b.vtrace", fake_recording("bio-offload", SEED_CAND))])
    out = io.StringIO()
    markdown.render(inp, out)
    md = out.getvalue()
    assert "| Read-heavy (GET + SET) | Value | Op | TPS (K req/s) | MB/s | P50 (µs) | P95 (µs) | P99 (µs) | Notes |" in md
    assert "| baseline | 64 B | GET | 5.45 | 0.35 | 10,263 | 11,039 | 11,623 |" in md
    assert "| bio-offload | 64 B | GET | 70.67 | 4.52 | 359 | 615 | 695 |" in md
    assert "| delta | 64 B | GET | +1196.70% | +1196.70% | \u221296.50% | \u221294.43% | \u221294.02% |" in md
    assert "Delta convention: bio-offload vs baseline." in md


def _launched(label, p50s_by_launch):
    """A compare side: one run a launch (tagged as merge_launches tags them), GET p50 as given."""
    runs = [{"workload": "read-heavy", "value_size": 64, "repeat": 1, "status": "ok", "launch": k,
             "ops": {"GET": {"role": "measured", "clients": 50, "tps": 5e7 / p, "p50_us": p, "p95_us": p * 1.1,
                             "p99_us": p * 1.2}}} for k, p in enumerate(p50s_by_launch, start=1)]
    return dict(fake_recording(label, []), runs=runs)


def test_the_compare_decision_on_launches_with_a_known_answer():
    """The decision a compare row carries, on launches drawn with a known change: a +25% shift of
    launches that spread 5% is found (its interval holding the truth) in nearly every draw, and
    launches of one distribution are called changed in about 5% (Welch's 95%)."""
    import numpy as np

    rng = np.random.default_rng(11)
    found = covered = false_pos = 0
    trials = 200
    for _ in range(trials):
        base = 9000 * rng.lognormal(0, 0.05, 4)
        shifted = 9000 * 1.25 * rng.lognormal(0, 0.05, 4)
        same = 9000 * rng.lognormal(0, 0.05, 4)
        b = summarize(_launched("a", base))
        (row,) = compare(b, summarize(_launched("b", shifted))).rows
        found += row.significant["p50_us"] is True
        lo, hi = row.interval["p50_us"].interval_pct
        covered += lo <= 25.0 <= hi
        (aa,) = compare(b, summarize(_launched("c", same))).rows
        false_pos += aa.significant["p50_us"] is True
        assert row.interval["p50_us"].launches == [4, 4]
    assert found >= 0.95 * trials and covered >= 0.88 * trials, (found, covered)
    assert false_pos <= 0.10 * trials, false_pos
