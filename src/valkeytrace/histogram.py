"""LatencyHistogram: the log-linear histogram of csrc/valkeytrace.h, driven from numpy.

The C side does the per-value work (record, percentiles); Python hands it whole arrays. The
same bucket layout is filled by the BPF probes and the shim, so their counts load here as-is.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from valkeytrace._native import ffi, lib
from valkeytrace.layout import HIST_BUCKETS


_BOUNDS = None


class LatencyHistogram:
    """Nanosecond latencies; relative error of any percentile <= 0.79% (bucket midpoints)."""

    __slots__ = ("_h",)

    def __init__(self):
        self._h = ffi.new("struct vt_hist *")

    # -- building -----------------------------------------------------------------------------
    @classmethod
    def from_values(cls, values_ns) -> "LatencyHistogram":
        hist = cls()
        hist.record(values_ns)
        return hist

    @classmethod
    def from_bucket_counts(cls, counts, *, sum_ns=None, min_ns=None, max_ns=None) -> "LatencyHistogram":
        """From a dense array of HIST_BUCKETS counts, or a {bucket index: count} mapping.

        Exact moments (kept by the probes next to the buckets) replace the estimates."""
        dense = np.zeros(HIST_BUCKETS, dtype=np.uint64)
        if isinstance(counts, Mapping):
            if counts:
                idx = np.fromiter((int(k) for k in counts.keys()), dtype=np.int64, count=len(counts))
                if idx.min() < 0 or idx.max() >= HIST_BUCKETS:
                    raise ValueError("histogram bucket index out of range")
                np.add.at(dense, idx, np.fromiter(counts.values(), dtype=np.uint64, count=len(counts)))
        else:
            arr = np.asarray(counts, dtype=np.uint64)
            if arr.shape != (HIST_BUCKETS,):
                raise ValueError(f"expected {HIST_BUCKETS} bucket counts, got shape {arr.shape}")
            dense[:] = arr
        hist = cls()
        if lib.vt_hist_set_buckets(hist._h, ffi.from_buffer("uint64_t[]", dense), HIST_BUCKETS) != 0:
            raise ValueError("bucket layout mismatch")
        if hist.count:
            if sum_ns is not None:
                hist._h.sum_ns = int(sum_ns)
            if min_ns is not None:
                hist._h.min_ns = int(min_ns)
            if max_ns is not None:
                hist._h.max_ns = int(max_ns)
        return hist

    def record(self, values_ns) -> None:
        arr = np.ascontiguousarray(values_ns, dtype=np.uint64)
        if arr.ndim != 1:
            arr = arr.ravel()
        if arr.size:
            lib.vt_hist_record_array(self._h, ffi.from_buffer("uint64_t[]", arr), arr.size)

    def merge(self, other: "LatencyHistogram") -> "LatencyHistogram":
        lib.vt_hist_merge(self._h, other._h)
        return self

    @classmethod
    def merged(cls, hists: Iterable["LatencyHistogram"]) -> "LatencyHistogram":
        out = cls()
        for h in hists:
            out.merge(h)
        return out

    # -- reading -------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return int(self._h.count)

    @property
    def sum_ns(self) -> int:
        return int(self._h.sum_ns)

    @property
    def min_ns(self) -> int:
        return int(self._h.min_ns)

    @property
    def max_ns(self) -> int:
        return int(self._h.max_ns)

    @property
    def mean_ns(self) -> float:
        return self.sum_ns / self.count if self.count else float("nan")

    @property
    def bucket_counts(self) -> np.ndarray:
        """A copy of the dense bucket counts."""
        return np.frombuffer(ffi.buffer(self._h.buckets), dtype=np.uint64).copy()

    @staticmethod
    def bucket_bounds() -> np.ndarray:
        """(HIST_BUCKETS, 2) array of [lower, upper) bounds in ns (computed once)."""
        global _BOUNDS
        if _BOUNDS is None:
            _BOUNDS = np.array([(lib.vt_hist_bucket_lower(i), lib.vt_hist_bucket_upper(i))
                                for i in range(HIST_BUCKETS)], dtype=np.uint64)
            _BOUNDS.setflags(write=False)
        return _BOUNDS

    def time_weighted_percentile(self, pct: float) -> float:
        """The value v such that pct% of the recorded *time* lies in intervals <= v: the interval
        length a random instant falls into (e.g. the loop iteration a request arrives during)."""
        counts = self.bucket_counts.astype(np.float64)
        if not counts.any():
            return float("nan")
        bounds = self.bucket_bounds().astype(np.float64)
        mid = (bounds[:, 0] + bounds[:, 1] - 1) / 2
        weight = np.cumsum(counts * mid)
        i = int(np.searchsorted(weight, weight[-1] * pct / 100.0))
        return float(min(max(mid[min(i, len(mid) - 1)], self.min_ns), self.max_ns))

    def percentiles(self, pcts) -> np.ndarray:
        """Values (ns) at the given percentiles (0-100); NaN for an empty histogram."""
        p = np.ascontiguousarray(np.atleast_1d(pcts), dtype=np.float64)
        if self.count == 0:
            return np.full(p.shape, np.nan)
        if np.any(~((p >= 0) & (p <= 100))):
            raise ValueError("percentiles must be within 0..100")
        out = np.zeros(p.shape, dtype=np.uint64)
        rc = lib.vt_hist_percentiles(self._h, ffi.from_buffer("double[]", p), p.size,
                                     ffi.from_buffer("uint64_t[]", out))
        if rc != 0:
            raise ValueError("percentile computation failed")
        return out.astype(np.float64)

    def percentile(self, pct: float) -> float:
        return float(self.percentiles([pct])[0])

    # -- persistence (sparse: recordings stay small) --------------------------------------------
    def to_dict(self) -> dict:
        counts = self.bucket_counts
        nz = np.flatnonzero(counts)
        return {"count": self.count, "sum_ns": self.sum_ns, "min_ns": self.min_ns,
                "max_ns": self.max_ns,
                "buckets": [[int(i), int(counts[i])] for i in nz]}

    @classmethod
    def from_dict(cls, d: Mapping) -> "LatencyHistogram":
        buckets = {int(i): int(c) for i, c in d.get("buckets", [])}
        return cls.from_bucket_counts(buckets, sum_ns=d.get("sum_ns"), min_ns=d.get("min_ns"),
                                      max_ns=d.get("max_ns"))

    @classmethod
    def from_record(cls, h) -> "LatencyHistogram":
        """From a recording's histogram: its declared record (recording.model.Histogram) or its dict."""
        if isinstance(h, Mapping):
            return cls.from_dict(h)
        return cls.from_bucket_counts({int(i): int(c) for i, c in h.buckets}, sum_ns=h.sum_ns, min_ns=h.min_ns,
                                      max_ns=h.max_ns)

    def __repr__(self):
        if not self.count:
            return "LatencyHistogram(empty)"
        p50, p99 = self.percentiles([50, 99])
        return f"LatencyHistogram(count={self.count}, p50={p50:.0f}ns, p99={p99:.0f}ns)"
