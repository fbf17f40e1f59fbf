"""Parsers for valkey-benchmark / redis-benchmark output (the non-quiet, non-CSV form).

Both clients print the same report (redis-benchmark 7.x, valkey-benchmark 8.x/9.x):

    ====== GET ======
      20000 requests completed in 0.22 seconds
      50 parallel clients
      64 bytes payload
    ...
    Latency by percentile distribution:
    50.000% <= 0.287 milliseconds (cumulative count 11886)
    ...
    Cumulative distribution of latencies:
    ...
    Summary:
      throughput summary: 89686.09 requests per second
      latency summary (msec):
              avg       min       p50       p95       p99       max
            0.294     0.064     0.287     0.343     0.631     2.391

and, while running, progress lines ended by '\\r' (about 8 per second):

    SET: rps=17154.2 (overall: 17154.2) avg_msec=0.440 (overall: 0.440)
"""
from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgspec

_NUM = r"[-+]?(?:\d+\.?\d*|nan|-nan|inf)"
_PROGRESS = re.compile(
    rf"(?P<test>[A-Za-z_][\w ]*): rps=(?P<rps>{_NUM}) \(overall: (?P<overall_rps>{_NUM})\) "
    rf"avg_msec=(?P<avg_ms>{_NUM}) \(overall: (?P<overall_avg_ms>{_NUM})\)")
_DIST_LINE = re.compile(r"^\s*([\d.]+)% <= ([\d.]+) milliseconds \(cumulative count (\d+)\)")


class ParseError(ValueError):
    pass


class Progress(NamedTuple):
    """One progress line: the rate and mean latency now and overall (NaN: no data yet)."""
    test: str
    rps: float
    overall_rps: float
    avg_ms: float
    overall_avg_ms: float


class Latency(msgspec.Struct):
    """The report's latency summary, milliseconds."""
    avg: float
    min: float
    p50: float
    p95: float
    p99: float
    max: float


class ClientSched(msgspec.Struct):
    """The client process's scheduler totals over its life (its schedstat)."""
    on_cpu_s: float
    wait_s: float
    lifetime_s: float


class ClientReport(msgspec.Struct, kw_only=True):
    """One test's final report as the client printed it, and what the runner adds (workload/benchmark.py)."""
    test: str
    tps: float
    latency_ms: Latency
    requests: int | None = None
    seconds: float | None = None        # the client's own time for them
    clients: int | None = None
    payload_bytes: int | None = None
    keep_alive: int | None = None
    threads: int | None = None
    percentile_distribution: list = []  # [[percent, latency_ms, cumulative_count], ...]
    cumulative_distribution: list = []
    command: list | None = None         # the runner's: the argv
    started_at: float | None = None
    window_s: float | None = None       # the client process's life
    client_cpu_s: float | None = None
    client_sched: ClientSched | None = None
    progress: list = []                 # [[seconds, rps, mean ms], ...]
    calibration_rps: float | None = None
    calibration_s: float | None = None
    attempts: int | None = None
    tries: list = []                    # [[requests, window seconds], ...] each window measured, the last kept


def _float(s: str) -> float:
    return float("nan") if "nan" in s else float(s)


def parse_progress(text: str) -> list[Progress]:
    """Every progress line in text (split on \\r or \\n), those without data yet dropped."""
    out = []
    for m in _PROGRESS.finditer(text):
        rec = Progress(m.group("test").strip(), *(_float(m.group(k)) for k in ("rps", "overall_rps", "avg_ms",
                                                                                "overall_avg_ms")))
        if rec.overall_rps == rec.overall_rps:  # not NaN: the first line has no data yet
            out.append(rec)
    return out


def parse_report(text: str) -> ClientReport:
    """The final report of one test: throughput, latency summary, both distributions.

    Raises ParseError when the text holds no complete report (e.g. the client was killed)."""
    text = text.replace("\r", "\n")
    m = re.search(r"====== (.+?) ======", text)
    if not m:
        if text.lstrip().startswith('"test","rps"'):
            raise ParseError("the client printed CSV (--csv): valkeytrace reads its plain report, with the "
                             "latency distributions")
        raise ParseError("no '====== TEST ======' report header in the client output")
    report: dict[str, Any] = {"test": m.group(1).strip()}
    body = text[m.end():]
    conv: Any
    for key, pattern, conv in (
        ("requests", r"(\d+) requests completed in ([\d.]+) seconds", None),
        ("clients", r"(\d+) parallel clients", int),
        ("payload_bytes", r"(\d+) bytes payload", int),
        ("keep_alive", r"keep alive: (\d+)", int),
        ("threads", r"threads: (\d+)", int),
    ):
        mm = re.search(pattern, body)
        if not mm:
            continue
        if key == "requests":
            report["requests"] = int(mm.group(1))
            report["seconds"] = float(mm.group(2))
        else:
            report[key] = conv(mm.group(1))
    tp = re.search(r"throughput summary: ([\d.]+) requests per second", body)
    if not tp:
        raise ParseError("client output has no 'throughput summary' (did the client finish?)")
    report["tps"] = float(tp.group(1))
    lat = re.search(r"latency summary \(msec\):\s*\n\s*avg\s+min\s+p50\s+p95\s+p99\s+max\s*\n\s*"
                    r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", body)
    if not lat:
        raise ParseError("client output has no latency summary")
    avg, lo, p50, p95, p99, hi = (float(x) for x in lat.groups())
    report["latency_ms"] = {"avg": avg, "min": lo, "p50": p50, "p95": p95, "p99": p99, "max": hi}
    report["percentile_distribution"] = _section(body, "Latency by percentile distribution:")
    report["cumulative_distribution"] = _section(body, "Cumulative distribution of latencies:")
    return msgspec.convert(report, ClientReport)


def _section(body: str, title: str) -> list[list[float]]:
    """[[percent, latency_ms, cumulative_count], ...] of one distribution section."""
    start = body.find(title)
    if start < 0:
        return []
    rows: list = []
    for line in body[start + len(title):].splitlines()[1:]:
        mm = _DIST_LINE.match(line)
        if not mm:
            if rows:
                break
            continue
        rows.append([float(mm.group(1)), float(mm.group(2)), int(mm.group(3))])
    return rows
