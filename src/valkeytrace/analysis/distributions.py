"""The distributions the plots draw, from a recording's runs: client latency CDFs per cell, the
fdatasync/fsync histograms merged per thread role, and the first measured window's blocked
intervals as lanes. Runs of the --fsync-sensitivity intervention are not the cell's: left out."""
from __future__ import annotations

import numpy as np

from valkeytrace.analysis.tables import latency_cdf
from valkeytrace.histogram import LatencyHistogram

SYNC_CALLS = ("fdatasync", "fsync")


def _cell_runs(doc: dict, workload: str, size: int):
    return [r for r in doc.get("runs", []) if r["workload"] == workload and r["value_size"] == size
            and r.get("status") == "ok" and not r.get("fsync_extra_delay_ns")]


def cell_cdfs(doc: dict, workload: str, size: int, op: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(latency µs, percentile)] per repeat of the cell, from the client's own distribution."""
    out = []
    for r in _cell_runs(doc, workload, size):
        dist = latency_cdf(r["ops"].get(op, {}))
        if dist:
            out.append((np.array([row[0] for row in dist]), np.array([row[1] for row in dist])))
    return out


def role_sync_histograms(doc: dict, workload: str, size: int) -> dict:
    """{role: {"count", "p50_us", "mids_us", "counts"}}: every repeat's fdatasync/fsync calls of
    the cell merged per thread role, with the bucket midpoints (µs) to draw them at."""
    merged: dict[str, LatencyHistogram] = {}
    for r in _cell_runs(doc, workload, size):
        for t in (r.get("server") or {}).get("threads", []):
            for call in SYNC_CALLS:
                rec = t.get("calls", {}).get(call)
                if rec:
                    merged.setdefault(t["role"], LatencyHistogram()).merge(LatencyHistogram.from_dict(rec))
    if not merged:
        return {}
    bounds = LatencyHistogram.bucket_bounds().astype(float)
    mids_us = (bounds[:, 0] + bounds[:, 1]) / 2 / 1e3
    return {role: {"count": h.count, "p50_us": h.percentile(50) / 1e3, "mids_us": mids_us,
                   "counts": h.bucket_counts.astype(float)} for role, h in merged.items()}


def first_blocked_timeline(doc: dict, seconds: float) -> dict | None:
    """The first run with blocked intervals: {"workload", "value_size", "lanes": {lane: [(start ms,
    duration ms, cause)]}} over its first `seconds`, or None."""
    r = next((r for r in doc.get("runs", []) if r.get("status") == "ok" and r.get("server")
              and r["server"].get("blocked_timeline", {}).get("events")), None)
    if r is None:
        return None
    server = r["server"]
    main = server["main_tid"]
    roles = {t["tid"]: t["role"] for t in server["threads"]}
    lanes: dict[str, list] = {}
    for start, dur, tid, cause, state in server["blocked_timeline"]["events"]:
        if start < 0 or start > seconds * 1e9:
            continue
        lane = ("main: " + ("call " + cause if state == "call" else f"off-CPU ({state})")) if tid == main \
            else f"{roles.get(tid, 'tid ' + str(tid))}: call {cause}"
        lanes.setdefault(lane, []).append((start / 1e6, dur / 1e6, cause))
    return {"workload": r["workload"], "value_size": r["value_size"], "lanes": lanes}
