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


def _delay(ns: int) -> str:
    return f"+{ns / 1e6:g} ms"


def _runs(e: Slope) -> str:
    """ "; each the median of 3 runs (+0 ms: 1)": what each point is (the runs behind it)."""
    runs = e.runs_per_point
    if not runs or max(runs) < 2:
        return ""
    most = max(set(runs), key=runs.count)
    fewer = [f"{_delay(ns)}: {n}" for ns, n in zip(e.point_delays_ns, runs) if n != most]
    return f"; each the median of {most} runs" + (f" ({', '.join(fewer)})" if fewer else "")


def _points(e: Slope) -> str:
    return " -> ".join(f"{y / 1000:.2f}" for _, y in e.points) + " ms"


def describe(entries: list[Slope]) -> list[str]:
    """A slope is stated only when reliable (R² >= 0.8, points monotonic); otherwise its points."""
    out = []
    for e in entries:
        what = f"{e.workload} {e.value_size} B {e.op} {e.metric.replace('_us', '')}"
        added = ", ".join(_delay(ns) for ns in e.added_delays_ns) + _runs(e)
        if not e.reliable:
            out.append(f"{what}: not measured reliably against {e.thread_role} fsync (R² {e.r2:.2f}; "
                       f"points {_points(e)} at added delays {added})")
            continue
        out.append(f"{what}: each extra 1 ms of {e.thread_role} fsync (p50) adds {e.slope:.2f} ms (R² {e.r2:.2f}, "
                   f"{len(e.points)} points: added delays {added})")
    return out
