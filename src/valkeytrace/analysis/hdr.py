"""The client's latency as HdrHistogram data (`valkeytrace export --hdr`): per cell and op, one histogram
whose percentiles are the report's (the median of the repeats), and one interval histogram per repeat.

What a recording keeps of a closed-loop op's latencies is the benchmark client's own distribution, as it
printed it: its percentile rows (50, 75, 87.5, ... % at or below a value), its cumulative rows (the share at
or below each 0.1 ms, then each ms) and its summary (min, p50, p95, p99, max); an open-loop op keeps its
whole histogram (from each request's due moment). A repeat's quantile function is drawn through those
points, straight between them (the summary's points kept exactly, a printed row that contradicts one of them
set aside). The cell's histogram takes, at each percentile, the median over its repeats of their values
there: its p50, p95 and p99 are the report's (each the median of the repeats' own); its count is theirs,
added. Values are recorded in µs (the client prints ms to the µs) with 3 significant digits (HdrHistogram's
resolution: 0.1%)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hdrh.histogram import HdrHistogram

from valkeytrace.analysis.tables import OPS_BY_WORKLOAD, WORKLOADS
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.recording.model import Document, Op, Run, decode

HDR_DIGITS = 3                   # HdrHistogram's significant digits
HDR_HIGHEST_US = 3_600_000_000   # the highest value it tracks: an hour
GRID = np.linspace(0.0, 100.0, 20_001)  # the percentiles a histogram is filled at (every 0.005%, 99.0 among them)
SUMMARY = (("min_us", 0.0), ("p50_us", 50.0), ("p95_us", 95.0), ("p99_us", 99.0), ("max_us", 100.0))


@dataclass
class Interval:
    """One repeat's histogram, over its window (ms since the epoch; None when the run did not say)."""
    repeat: int | None
    launch: int | None
    start_ms: float | None
    length_ms: float
    histogram: HdrHistogram


@dataclass
class CellLatency:
    """One op of one cell: its histogram (the report's percentiles), each repeat's, and where they came from."""
    workload: str
    value_size: int
    rate: float | None
    op: str
    histogram: HdrHistogram
    intervals: list
    source: str    # "the client's printed distribution" or "the open loop's histogram"
    p50_us: float  # the report's (the median of the repeats'): what the histogram's p50 is
    p99_us: float | None


def cell_latencies(doc: Document | dict) -> list[CellLatency]:
    """Every cell and op of the recording (the runs at no added fsync delay) that has a latency distribution."""
    doc = decode(doc)
    groups: dict[tuple, list[Run]] = {}
    for r in doc.runs:
        if r.status == "ok" and r.workload in OPS_BY_WORKLOAD and not r.fsync_extra_delay_ns:
            groups.setdefault((r.workload, int(r.value_size), r.load.rate if r.load else None), []).append(r)
    out = []
    for key in sorted(groups, key=lambda k: (WORKLOADS.index(k[0]), k[1], k[2] or 0)):
        for op in OPS_BY_WORKLOAD[key[0]]:
            cell = _cell(key, op, groups[key])
            if cell is not None:
                out.append(cell)
    return out


def _cell(key: tuple, op: str, runs: list[Run]) -> CellLatency | None:
    reps = [(r, o, q) for r in runs if (o := r.ops.get(op)) is not None and (q := quantiles(o)) is not None]
    if not reps:
        return None
    counts = [_count(o) for _, o, _ in reps]
    values = np.median(np.array([q for _, _, q in reps]), axis=0)
    intervals = [Interval(r.repeat, r.launch, None if o.started_at is None else o.started_at * 1000.0,
                          (o.seconds or 0.0) * 1000.0, fill(q, n)) for (r, o, q), n in zip(reps, counts)]
    p50s = [o.p50_us for _, o, _ in reps if o.p50_us is not None]
    p99s = [o.p99_us for _, o, _ in reps if o.p99_us is not None]
    source = "the open loop's histogram" if reps[0][1].corrected_hist else "the client's printed distribution"
    return CellLatency(key[0], key[1], key[2], op, fill(values, sum(counts)), intervals, source,
                       float(np.median(p50s)) if p50s else float(values[len(GRID) // 2]),
                       float(np.median(p99s)) if p99s else None)


def _count(o: Op) -> int:
    if o.requests:
        return int(o.requests)
    rows = [int(r[2]) for r in o.percentile_distribution if isinstance(r[2], (int, float))]
    return max(rows, default=0) or max(1, round((o.tps or 0) * (o.seconds or 0)))


def quantiles(o: Op) -> np.ndarray | None:
    """The op's value (µs) at each percentile of GRID, or None without a distribution."""
    summary = [(p, float(v)) for name, p in SUMMARY if (v := getattr(o, name)) is not None]
    rows = _cdf_rows(o)
    if not rows and len(summary) < 2:
        return None
    lo, hi = o.min_us, o.max_us
    rows = [(v, p) for v, p in rows if (lo is None or v >= lo) and (hi is None or v <= hi)
            and not any((v < sv and p >= sp) or (v > sv and p < sp) for sp, sv in summary)]
    pts = sorted(set(rows + [(v, p) for p, v in summary]))
    v = np.array([x[0] for x in pts])
    p = np.maximum.accumulate(np.array([x[1] for x in pts]))
    return quantile_function(v, p, GRID)


def _cdf_rows(o: Op) -> list[tuple[float, float]]:
    """(value µs, percent at or below it): the open loop's histogram at its buckets' upper bounds, else the
    client's printed percentile and cumulative rows."""
    if o.corrected_hist:
        h = LatencyHistogram.from_dict(o.corrected_hist)
        counts = h.bucket_counts.astype(np.float64)
        if not counts.sum():
            return []
        nz = np.flatnonzero(counts)
        cum = np.cumsum(counts)[nz] * 100.0 / counts.sum()
        upper = h.bucket_bounds()[nz, 1].astype(np.float64) / 1000.0
        return list(zip(upper.tolist(), cum.tolist()))
    out = []
    for r in list(o.percentile_distribution) + list(o.cumulative_distribution):
        try:
            out.append((float(r[1]) * 1000.0, float(r[0])))
        except (TypeError, ValueError, IndexError):
            continue  # a row the schema let through that is not one
    return out


def quantile_function(v: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """At each percentile q, the least value whose share at or below it reaches q, the CDF taken straight
    between its points (v increasing, p non-decreasing): where the CDF is flat, the quantile jumps."""
    j = np.searchsorted(p, q, side="left")  # the first point at or above q
    j = np.clip(j, 0, len(p) - 1)
    prev = np.clip(j - 1, 0, len(p) - 1)
    span = p[j] - p[prev]
    frac = np.where(span > 0, (q - p[prev]) / np.where(span > 0, span, 1.0), 1.0)
    out = np.where((j == 0) | (p[j] <= q), v[j], v[prev] + np.clip(frac, 0.0, 1.0) * (v[j] - v[prev]))
    return np.where(q >= p[-1], np.minimum(out, v[-1]), out)


def fill(values_us: np.ndarray, count: int) -> HdrHistogram:
    """A histogram of `count` values whose share at or below values_us[k] is GRID[k]: one value at the least,
    the others spread over the percentiles (each grid step's share at its upper end)."""
    h = HdrHistogram(1, HDR_HIGHEST_US, HDR_DIGITS)
    count = max(int(count), 1)
    cum = 1 + np.round((count - 1) * GRID / 100.0).astype(np.int64)
    step = np.diff(cum, prepend=0)
    vals = np.clip(np.rint(values_us), 1, HDR_HIGHEST_US).astype(np.int64)
    uniq, inv = np.unique(vals, return_inverse=True)
    for value, n in zip(uniq.tolist(), np.bincount(inv, weights=step).astype(np.int64).tolist()):
        if n:
            h.record_value(value, n)
    return h
