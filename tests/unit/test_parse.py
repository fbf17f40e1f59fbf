"""Benchmark-client output parsers, on outputs captured from real runs (tests/data; the
valkey-benchmark ones, with how they were made, in tests/data/valkey-benchmark-unstable-2025-01)."""
from pathlib import Path

import msgspec
import pytest

from valkeytrace.analysis.tables import latency_cdf
from valkeytrace.recording import document
from valkeytrace.workload.parse import ParseError, parse_progress, parse_report

DATA = Path(__file__).resolve().parent.parent / "data"
VALKEY = DATA / "valkey-benchmark-unstable-2025-01"


def test_redis_benchmark_get_report():
    rep = parse_report((DATA / "redis-benchmark-7.0.15-get.txt").read_text())
    assert rep.test == "GET"
    assert rep.requests == 20000 and rep.clients == 50 and rep.payload_bytes == 64
    assert rep.tps == pytest.approx(89686.09)
    assert msgspec.structs.asdict(rep.latency_ms) == {"avg": 0.294, "min": 0.064, "p50": 0.287, "p95": 0.343,
                                 "p99": 0.631, "max": 2.391}
    dist = rep.percentile_distribution
    assert dist[0] == [0.0, 0.071, 1] and dist[-1] == [100.0, 2.391, 20000]
    assert [r[2] for r in dist] == sorted(r[2] for r in dist)  # cumulative counts never go down
    assert rep.cumulative_distribution[-1][2] == 20000


def test_redis_benchmark_set_report():
    rep = parse_report((DATA / "redis-benchmark-7.0.15-set.txt").read_text())
    assert rep.test == "SET" and rep.payload_bytes == 256
    assert rep.latency_ms.p99 == pytest.approx(4.863)


def test_valkey_benchmark_threads_line():
    rep = parse_report((VALKEY / "get-c50-d64-threads2.txt").read_text())
    assert rep.threads == 2 and rep.tps == pytest.approx(39840.64)
    assert msgspec.structs.asdict(rep.latency_ms) == {"avg": 0.750, "min": 0.048, "p50": 0.503, "p95": 2.671, "p99": 4.351, "max": 19.295}


@pytest.mark.parametrize("name,test,requests,size,tps", [
    ("set-c50-d64.txt", "SET", 20000, 64, 39603.96),
    ("get-c50-d1024-under-set.txt", "GET", 30000, 1024, 37313.43),
])
def test_valkey_benchmark_reports(name, test, requests, size, tps):
    rep = parse_report((VALKEY / name).read_text())
    assert (rep.test, rep.requests, rep.clients, rep.payload_bytes) == (test, requests, 50, size)
    assert rep.tps == pytest.approx(tps)
    assert rep.cumulative_distribution[-1][2] == requests == rep.percentile_distribution[-1][2]


def test_latency_cdf_merges_both_distributions():
    rep = parse_report((VALKEY / "get-c50-d64-threads2.txt").read_text())
    cdf = latency_cdf(document.op_record(rep, "measured"))  # as the recording keeps it
    # 17 halving percentiles alone; with the cumulative section every ~0.1 ms up to 2 ms
    assert len(rep.percentile_distribution) == 17 and len(cdf) > 40
    assert [p for _, p in cdf] == sorted(p for _, p in cdf) and cdf[-1][1] == 100.0
    assert (503.0, 50.645) in cdf  # a cumulative-section point: 50.645% <= 0.503 ms


def test_valkey_benchmark_interrupted_and_csv():
    text = (VALKEY / "set-c8-background-interrupted.txt").read_text(errors="replace")
    assert len(parse_progress(text)) >= 10
    with pytest.raises(ParseError):
        parse_report(text)
    with pytest.raises(ParseError, match="CSV"):
        parse_report((VALKEY / "get-c50-d64.csv").read_text())


def test_progress_lines_of_an_interrupted_client():
    text = (DATA / "redis-benchmark-7.0.15-set-progress-interrupted.txt").read_text(errors="replace")
    progress = parse_progress(text)
    assert len(progress) >= 10  # about 8 a second
    assert all(p.test == "SET" and p.overall_rps > 0 for p in progress)  # the -nan line is dropped
    with pytest.raises(ParseError):
        parse_report(text)  # killed clients print no report


def test_garbage_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_report("Could not connect to Redis at 127.0.0.1:1: Connection refused\n")
