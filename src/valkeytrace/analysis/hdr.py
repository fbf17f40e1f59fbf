"""The client's latency as HdrHistogram data (`valkeytrace export --hdr`): per cell and op, one histogram
whose percentiles are the report's (the median of the repeats), and one interval histogram per repeat.

What a recording keeps of a closed-loop op's latencies is the benchmark client's own distribution, as it
printed it: its percentile rows (50, 75, 87.5, ... % at or below a value), its cumulative rows (the share at
or below each 0.1 ms, then each ms) and its summary (min, p50, p95, p99, max); an open-loop op keeps its
whole histogram (from each request's due moment). A repeat's quantile function is drawn through those
points, straight between them (the summary's points kept exactly, a printed row that contradicts one of them
set aside). The cell's histogram takes, at each percentile, the median over its repeats of their values
there: its p50, p95 and p99 are the report's (each the median of the repeats' own), at the ranks HdrHistogram
reads them; its count is theirs, added. Values are recorded in µs (the client prints ms to the µs) with 3 significant digits (HdrHistogram's
resolution: 0.1%)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.iterators import PercentileIterator

from valkeytrace.analysis.tables import OPS_BY_WORKLOAD, WORKLOADS
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.recording.model import Document, Op, Run, decode

HDR_DIGITS = 3                   # HdrHistogram's significant digits
HDR_HIGHEST_US = 3_600_000_000   # the highest value it tracks: an hour
SUMMARY = (("min_us", 0.0), ("p50_us", 50.0), ("p95_us", 95.0), ("p99_us", 99.0), ("max_us", 100.0))
REPORTED = (50.0, 95.0, 99.0)  # the percentiles a report shows: a histogram's are exactly its
RANKS_MOST = 100_000  # ranks evaluated one by one; past it, spread with weights (ranks()): 610 MB at 6M requests before


class _Levels(PercentileIterator):
    """The percentile levels a distribution table steps through, as HdrHistogram's Java and C libraries step
    them (memtier's .hgrm): each half of the distance left to 100% in `ticks` equal steps, the half a power of
    two. (hdrhistogram 0.10.8 steps by the exact distance left, so its rows never land on 50% or 99%.)"""

    def increment_iteration_level(self):
        self.percentile_to_iterate_from = self.percentile_to_iterate_to
        gap = 100.0 - self.percentile_to_iterate_to
        if gap > 0:
            half = 2 ** (int(math.log(100.0 / gap) / math.log(2)) + 1)
            self.percentile_to_iterate_to += 100.0 / (self.percentile_ticks_per_half_distance * half)


class Histogram(HdrHistogram):
    """HdrHistogram, its percentile table at the Java library's levels (with 25 ticks a half: 50, 90, 95 and
    99% among them, exactly)."""

    def get_percentile_iterator(self, ticks_per_half_distance):
        return _Levels(self, ticks_per_half_distance)


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
    reps = [(r, o, q) for r in runs if (o := r.ops.get(op)) is not None and (q := curve(o)) is not None]
    if not reps:
        return None
    counts = [_count(o) for _, o, _ in reps]
    intervals = [Interval(r.repeat, r.launch, None if o.started_at is None else o.started_at * 1000.0,
                          (o.seconds or 0.0) * 1000.0, fill([q], n)) for (r, o, q), n in zip(reps, counts)]
    p50s = [o.p50_us for _, o, _ in reps if o.p50_us is not None]
    p99s = [o.p99_us for _, o, _ in reps if o.p99_us is not None]
    source = "the open loop's histogram" if reps[0][1].corrected_hist else "the client's printed distribution"
    hist = fill([q for _, _, q in reps], sum(counts))
    return CellLatency(key[0], key[1], key[2], op, hist, intervals, source,
                       float(np.median(p50s)) if p50s else float(hist.get_value_at_percentile(50)),
                       float(np.median(p99s)) if p99s else None)


def _count(o: Op) -> int:
    if o.requests:
        return int(o.requests)
    rows = [int(r[2]) for r in o.percentile_distribution if isinstance(r[2], (int, float))]
    return max(rows, default=0) or max(1, round((o.tps or 0) * (o.seconds or 0)))


def curve(o: Op) -> tuple[np.ndarray, np.ndarray] | None:
    """The op's CDF as points (µs increasing, percent non-decreasing), or None without a distribution."""
    summary = [(p, float(v)) for name, p in SUMMARY if (v := getattr(o, name)) is not None]
    rows = _cdf_rows(o)
    if not rows and len(summary) < 2:
        return None
    lo, hi = o.min_us, o.max_us
    rows = [(v, p) for v, p in rows if (lo is None or v >= lo) and (hi is None or v <= hi)
            and not any((v < sv and p >= sp) or (v > sv and p < sp) for sp, sv in summary)]
    pts = sorted(set(rows + [(v, p) for p, v in summary]))
    v = np.array([x[0] for x in pts])
    return v, np.maximum.accumulate(np.array([x[1] for x in pts]))


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


def ranks(n: int, most: int = RANKS_MOST) -> tuple[np.ndarray, np.ndarray]:
    """(the ranks, 1..n, whose values are evaluated; how many ranks each stands for): every rank up to `most`;
    beyond it `most` evenly spread, n and the ranks HdrHistogram reads at each percentile a report shows (its
    get_value_at_percentile rounds P x n, its percentile table takes the first rank at or above it), each standing
    for the ranks since the one before, recorded at its value: the count at or below it stays its rank, so the
    reported percentiles are exactly the full histogram's, and the memory does not grow with the requests."""
    if n <= most:
        k = np.arange(1, n + 1)
    else:
        exact = [x for q in REPORTED for x in (int(np.ceil(q * n / 100.0)), int(q * n / 100.0 + 0.5)) if 1 <= x <= n]
        k = np.unique(np.concatenate([np.rint(np.linspace(1, n, most)).astype(np.int64), np.array(exact + [1, n])]))
    return k, np.diff(k, prepend=0)


def rank_percentiles(n: int, k: np.ndarray | None = None) -> np.ndarray:
    """The percentile each rank k (default 1..n) of n values stands at: k/n, but the least at 0 and, for each
    percentile a report shows, the ranks HdrHistogram reads there exactly at it."""
    k = np.arange(1, n + 1) if k is None else k
    p = 100.0 * k / n
    p[k == 1] = 0.0
    for q in REPORTED:
        for x in (int(np.ceil(q * n / 100.0)), int(q * n / 100.0 + 0.5)):
            p[k == x] = q
    return p


def fill(curves: list, count: int, most: int = RANKS_MOST) -> Histogram:
    """A histogram of `count` values: the k-th the median over the curves of their quantiles at its rank's
    percentile (rank_percentiles), recorded in µs; past `most` requests, ranks() evaluated with their weights."""
    h = Histogram(1, HDR_HIGHEST_US, HDR_DIGITS)
    n = max(int(count), 1)
    k, weight = ranks(n, most)
    at = rank_percentiles(n, k)
    values = np.median(np.array([quantile_function(v, p, at) for v, p in curves]), axis=0)
    vals = np.clip(np.rint(values), 1, HDR_HIGHEST_US).astype(np.int64)
    order = np.argsort(vals, kind="stable")
    uniq, first = np.unique(vals[order], return_index=True)
    for value, w in zip(uniq.tolist(), np.add.reduceat(weight[order], first).tolist()):
        h.record_value(value, int(w))
    return h
