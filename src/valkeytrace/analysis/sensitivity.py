"""Causal sensitivity by intervention (record --fsync-sensitivity): each cell is also run with a
known delay added to every fsync/fdatasync; the slope of each measured op's latency against the
measured fsync time of each thread that carries the fsync says how much of the fsync reaches the
client (a Coz-style virtual slowdown, done for real). Pure: from a recording's runs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from valkeytrace.analysis.tables import MEASURED_OP, extra_delays, summarize
from valkeytrace.analysis.verdict import reliable

MIN_POINTS = 3


def _fsync_p50(server, role: str) -> float | None:
    t = server.role(role) if server else None
    if t is None:
        return None
    call = t.fdatasync if t.fdatasync.count else t.fsync
    return call.p50_us if call.count else None


@dataclass
class Line:
    slope: float
    slope_stderr: float
    intercept_us: float
    r2: float


def fit(points: list) -> Line:
    """The least-squares line (scipy.stats.linregress) with its standard error and R²."""
    from scipy.stats import linregress

    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    if np.ptp(y) == 0:  # a flat line: linregress's R² is undefined
        return Line(0.0, 0.0, round(float(y[0]), 1), 0.0)
    r = linregress(x, y)
    return Line(round(float(r.slope), 4), round(float(r.stderr), 4), round(float(r.intercept), 1),
                round(float(r.rvalue) ** 2, 4))


@dataclass
class Slope:
    """runs[].sensitivity[]: one op's metric against one thread role's fsync p50 over the added delays."""
    workload: str
    op: str
    value_size: int
    metric: str
    thread_role: str
    slope: float
    slope_stderr: float
    intercept_us: float
    r2: float
    points: list
    reliable: bool
    runs_per_point: list
    point_delays_ns: list
    added_delays_ns: list

    def to_json(self) -> dict:
        return asdict(self)


def sensitivity(doc) -> list[Slope]:
    """runs[].sensitivity entries (docs/report-json.md): per cell, measured op, metric and
    fsync-carrying thread role, the least-squares line of the op's latency on that role's fsync p50."""
    levels = extra_delays(doc)
    if len(levels) < 2:
        return []
    by_level = {lvl: {(c.workload, c.value_size): c for c in summarize(doc, lvl)} for lvl in levels}
    out = []
    for key, base in by_level[0].items():
        op = MEASURED_OP.get(key[0])
        if not op or op not in base.ops:
            continue
        at = [(lvl, c) for lvl in levels if (c := by_level[lvl].get(key)) is not None and op in c.ops and c.server]
        cells = [c for _, c in at]
        roles = sorted({t.role for c in cells if c.server for t in c.server.threads
                        if t.fdatasync.count or t.fsync.count})
        for role in roles:
            # the mean beside the percentiles: a run's p50 can lie on another path of the server
            # (1 run in 9 here: GET-only rounds answered with no fsync), its mean cannot (Little's
            # law: the clients' requests in flight are fixed), so the mean's slope holds when the
            # p50's does not (tests/integration/test_explain_controls.py)
            for metric in ("p50_us", "p99_us", "mean_us"):
                measured = [(lvl, c, x, y) for lvl, c in at
                            if (x := _fsync_p50(c.server, role)) is not None and (y := c.ops[op].get(metric)) is not None]
                if len(measured) < MIN_POINTS:
                    continue
                pts = [[round(x, 1), round(y, 1)] for _, _, x, y in measured]
                line = fit(pts)
                out.append(Slope(key[0], op, key[1], metric, role, **asdict(line), points=pts,
                                 reliable=reliable(pts, line.r2), runs_per_point=[c.repeats for _, c, _, _ in measured],
                                 point_delays_ns=[lvl for lvl, _, _, _ in measured], added_delays_ns=levels))
    return out
