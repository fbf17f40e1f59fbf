"""One measured window from two cumulative readings: the differ both backends use. The eBPF maps
and the shim's region both hold per-thread, per-call cumulative histograms (csrc/hist.c buckets);
a window is the bucket-wise difference of the readings at its edges."""
from __future__ import annotations

import numpy as np

from valkeytrace._native import lib
from valkeytrace.histogram import LatencyHistogram


def histogram_delta(after, before, sum_after: int, sum_before: int, max_ns: int, bytes_: int):
    """The window's histogram record (recording.model.Histogram, as a dict), or None when nothing was
    counted in it. after/before: dense bucket counts (before may be 0: the thread is new). The
    readings' max is all-time: it is kept only when it falls inside the window's top bucket."""
    diff = after - before
    if not np.any(diff):
        return None
    top = int(np.flatnonzero(diff)[-1])
    exact = max_ns < lib.vt_hist_bucket_upper(top)
    rec: dict = LatencyHistogram.from_bucket_counts(diff, sum_ns=sum_after - sum_before,
                                                          max_ns=max_ns if exact else None).to_dict()
    rec["bytes"] = int(bytes_)
    return rec
