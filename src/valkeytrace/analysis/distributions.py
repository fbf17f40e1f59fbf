"""The distributions the plots draw, from a recording's runs: client latency CDFs per cell, the
fdatasync/fsync histograms merged per thread role, and the first measured window's blocked
intervals as lanes. Runs of the --fsync-sensitivity intervention are not the cell's: left out."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from valkeytrace.analysis.tables import latency_cdf
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.recording.model import Document, Run, decode

SYNC_CALLS = ("fdatasync", "fsync")


def _cell_runs(doc: Document, workload: str, size: int) -> list[Run]:
    return [r for r in doc.runs if r.workload == workload and r.value_size == size and r.status == "ok"
            and not r.fsync_extra_delay_ns]


def cell_cdfs(doc, workload: str, size: int, op: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(latency µs, percentile)] per repeat of the cell, from the client's own distribution."""
    out = []
    for r in _cell_runs(decode(doc), workload, size):
        dist = latency_cdf(r.ops[op]) if op in r.ops else []
        if dist:
            out.append((np.array([row[0] for row in dist]), np.array([row[1] for row in dist])))
    return out


@dataclass
class RoleHistogram:
    """One thread role's fdatasync/fsync calls over a cell's repeats, with the buckets' midpoints."""
    count: int
    p50_us: float
    mids_us: np.ndarray
    counts: np.ndarray


def role_sync_histograms(doc, workload: str, size: int) -> dict[str, RoleHistogram]:
    """{role: RoleHistogram}: every repeat's fdatasync/fsync calls of the cell merged per thread role,
    with the bucket midpoints (µs) to draw them at."""
    merged: dict[str, LatencyHistogram] = {}
    for r in _cell_runs(decode(doc), workload, size):
        for t in (r.server.threads if r.server else []):
            for call in SYNC_CALLS:
                rec = t.calls.get(call)
                if rec:
                    merged.setdefault(t.role, LatencyHistogram()).merge(LatencyHistogram.from_record(rec))
    if not merged:
        return {}
    bounds = LatencyHistogram.bucket_bounds().astype(float)
    mids_us = (bounds[:, 0] + bounds[:, 1]) / 2 / 1e3
    return {role: RoleHistogram(h.count, h.percentile(50) / 1e3, mids_us, h.bucket_counts.astype(float))
            for role, h in merged.items()}


@dataclass
class Lanes:
    """The first run with blocked intervals: its cell and {lane: [(start ms, duration ms, cause)]}."""
    workload: str
    value_size: int
    lanes: dict


def first_blocked_timeline(doc, seconds: float) -> Lanes | None:
    """The first run with blocked intervals over its first `seconds`, or None."""
    r = next((r for r in decode(doc).runs if r.status == "ok" and r.server and r.server.blocked_timeline.events), None)
    if r is None or r.server is None:
        return None
    server = r.server
    main = server.main_tid
    roles = {t.tid: t.role for t in server.threads}
    lanes: dict[str, list] = {}
    for start, dur, tid, cause, state in server.blocked_timeline.events:
        if start < 0 or start > seconds * 1e9:
            continue
        lane = ("main: " + ("call " + cause if state == "call" else f"off-CPU ({state})")) if tid == main \
            else f"{roles.get(tid, 'tid ' + str(tid))}: call {cause}"
        lanes.setdefault(lane, []).append((start / 1e6, dur / 1e6, cause))
    return Lanes(r.workload, r.value_size, lanes)
