"""Benchmark-client output parsers, on outputs captured from real runs (tests/data)."""
from pathlib import Path

import pytest

from valkeytrace.workload.parse import ParseError, parse_progress, parse_report

DATA = Path(__file__).resolve().parent.parent / "data"


def test_redis_benchmark_get_report():
    rep = parse_report((DATA / "redis-benchmark-7.0.15-get.txt").read_text())
    assert rep["test"] == "GET"
    assert rep["requests"] == 20000 and rep["clients"] == 50 and rep["payload_bytes"] == 64
    assert rep["tps"] == pytest.approx(89686.09)
    assert rep["latency_ms"] == {"avg": 0.294, "min": 0.064, "p50": 0.287, "p95": 0.343,
                                 "p99": 0.631, "max": 2.391}
    dist = rep["percentile_distribution"]
    assert dist[0] == [0.0, 0.071, 1] and dist[-1] == [100.0, 2.391, 20000]
    assert [r[2] for r in dist] == sorted(r[2] for r in dist)  # cumulative counts never go down
    assert rep["cumulative_distribution"][-1][2] == 20000


def test_redis_benchmark_set_report():
    rep = parse_report((DATA / "redis-benchmark-7.0.15-set.txt").read_text())
    assert rep["test"] == "SET" and rep["payload_bytes"] == 256
    assert rep["latency_ms"]["p99"] == pytest.approx(4.863)


def test_valkey_benchmark_threads_line():
    rep = parse_report((DATA / "valkey-benchmark-9-format-get-threads.txt").read_text())
    assert rep["threads"] == 2 and rep["tps"] == pytest.approx(89686.09)


def test_progress_lines_of_an_interrupted_client():
    text = (DATA / "redis-benchmark-7.0.15-set-progress-interrupted.txt").read_text(errors="replace")
    progress = parse_progress(text)
    assert len(progress) >= 10  # about 8 a second
    assert all(p["test"] == "SET" and p["overall_rps"] > 0 for p in progress)  # the -nan line is dropped
    with pytest.raises(ParseError):
        parse_report(text)  # killed clients print no report


def test_garbage_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_report("Could not connect to Redis at 127.0.0.1:1: Connection refused\n")
