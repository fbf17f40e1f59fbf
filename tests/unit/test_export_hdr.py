"""export --hdr (issue 76): each cell and op's client latency as HdrHistogram's percentile distribution (.hgrm) and
interval log (.hlog), from real recordings (tests/data, a compare's two sides). The truth they are held to is
the recording's own: each repeat's p50/p99 as the client printed them, the median of the repeats computed here
from the raw runs; the .hlog is read back by the hdrhistogram package's own reader."""
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from valkeytrace.analysis.hdr import quantile_function, rank_percentiles
from valkeytrace.cli import main
from valkeytrace.recording import format as recfmt

DATA = Path(__file__).resolve().parent.parent / "data"
BASE, CAND = DATA / "golden-v2-compare-baseline.vtrace", DATA / "golden-v2-compare-candidate.vtrace"


def _raw(path) -> dict:
    """{(workload, size, op): [each ok repeat's op dict]} from the recording's runs."""
    out: dict = {}
    for r in recfmt.read(path)["runs"]:
        if r["status"] == "ok" and not r.get("fsync_extra_delay_ns"):
            for op, o in r["ops"].items():
                if o.get("p50_us"):
                    out.setdefault((r["workload"], r["value_size"], op), []).append(o)
    return out


def _hgrm_at(path: Path, q: float) -> float:
    """The value (ms) of the first row at or above percentile q, as a reader of the table takes it."""
    rows = [(float(m[1]), float(m[2])) for line in path.read_text().splitlines()
            if (m := re.match(r"\s*([0-9.]+)\s+([0-9.]+)\s+[0-9]+", line))]
    return next(v for v, p in rows if p >= q)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("hdr")
    res = CliRunner().invoke(main, ["export", str(BASE), str(CAND), "--hdr", str(out / "cmp")])
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("side,path", [("baseline", BASE), ("candidate", CAND)])
def test_each_side_each_cell_and_op_holds_the_recordings_p50_and_p99(exported, side, path):
    raw = _raw(path)
    assert raw and len(list(exported.glob(f"cmp_{side}_*.hgrm"))) == len(raw)
    for (workload, size, op), reps in raw.items():
        f = exported / f"cmp_{side}_{workload}_{size}B_{op}.hgrm"
        for q, key in ((0.5, "p50_us"), (0.99, "p99_us")):
            want = float(np.median([o[key] for o in reps]))  # the report's figure: the median of the repeats
            got = _hgrm_at(f, q) * 1000.0
            assert got == pytest.approx(want, rel=0.002), (f.name, key)  # HdrHistogram's 3 digits: 0.1% a value
        text = f.read_text()
        assert text.startswith("       Value     Percentile TotalCount 1/(1-Percentile)")
        total = sum(o["requests"] for o in reps)
        assert f"TotalCount     = {total:12.3f}]" in text


def test_the_interval_log_is_read_back_by_the_hdrhistogram_library(exported):
    raw = _raw(BASE)
    for (workload, size, op), reps in raw.items():
        reader = HistogramLogReader(str(exported / f"cmp_baseline_{workload}_{size}B_{op}.hlog"),
                                    HdrHistogram(1, 3_600_000_000, 3))
        got = []
        while (h := reader.get_next_interval_histogram()) is not None:
            got.append(h)
        reader.close()
        assert len(got) == len(reps)  # one interval per repeat
        for h, o in zip(got, reps):
            assert h.get_total_count() == o["requests"]
            assert h.get_value_at_percentile(50) == pytest.approx(o["p50_us"], rel=0.002)
            assert h.get_value_at_percentile(99) == pytest.approx(o["p99_us"], rel=0.002)
            assert (h.get_end_time_stamp() - h.get_start_time_stamp()) / 1000 == pytest.approx(o["seconds"], abs=1e-3)


def test_the_quantile_function_of_a_cdf_with_a_gap():
    # 40% of the values at or below 1 ms, none between 1 and 5 ms, all by 6 ms
    v, p = np.array([100.0, 1000.0, 5000.0, 6000.0]), np.array([0.0, 40.0, 40.0, 100.0])
    q = quantile_function(v, p, np.array([0.0, 20.0, 40.0, 40.5, 70.0, 100.0]))
    assert q.tolist() == pytest.approx([100.0, 550.0, 1000.0, 5000.0 + 1000.0 * 0.5 / 60, 5500.0, 6000.0])
    p = rank_percentiles(3390)  # HdrHistogram reads p99 at rank 3356 (get_value_at_percentile) or 3357 (its table)
    assert p[0] == 0.0 and p[3355] == p[3356] == 99.0 and p[1694] == 50.0 and np.all(np.diff(p) >= 0)


def test_bad_input_is_one_line_and_leaves_nothing(tmp_path):
    r = CliRunner().invoke(main, ["export", str(BASE), "--hdr", str(tmp_path / "no" / "x")])
    assert r.exit_code == 2 and "does not exist" in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["export", str(BASE), str(CAND), str(BASE), "--hdr", str(tmp_path / "x")])
    assert r.exit_code == 2 and "one recording, or a compare's two" in r.output
    (tmp_path / "x_write-only_64B_SET.hlog").mkdir()  # the last file cannot be written: none stays
    r = CliRunner().invoke(main, ["export", str(BASE), "--hdr", str(tmp_path / "x")])
    assert r.exit_code == 1 and "cannot write" in r.output
    assert [p.name for p in tmp_path.iterdir()] == ["x_write-only_64B_SET.hlog"]  # the three written before it, gone


def test_a_long_run_is_filled_from_spread_ranks_with_the_same_percentiles():
    """Past RANKS_MOST requests the histogram is filled from spread ranks, each weighted by the ranks it stands for
    (one float a request took 610 MB at 6M requests): the count, and the p50/p95/p99 HdrHistogram reads, are those
    of the histogram filled rank by rank."""
    import numpy as np

    from valkeytrace.analysis import hdr

    v = np.array([50.0, 200.0, 900.0, 4_000.0, 9_000.0, 30_000.0])
    curves = [(v, np.array([0.0, 30.0, 60.0, 94.0, 99.2, 100.0])), (v * 1.1, np.array([0.0, 25.0, 55.0, 95.0, 99.0, 100.0]))]
    n = 1_234_567
    k, weight = hdr.ranks(n, 1000)
    assert len(k) <= 1000 + 8 and int(weight.sum()) == n and k[-1] == n
    full, spread = hdr.fill(curves, n, most=n), hdr.fill(curves, n, most=1000)
    assert spread.get_total_count() == full.get_total_count() == n
    for q in hdr.REPORTED:
        assert spread.get_value_at_percentile(q) == full.get_value_at_percentile(q), q
