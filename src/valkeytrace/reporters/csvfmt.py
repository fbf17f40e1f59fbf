"""CSV: one row per (system, workload, value size, op), medians with n and spread; with --compare,
a delta row per compared op (percent, candidate vs baseline) with its significance per metric.
Every row has every column; figures rounded to what they measure (µs to 0.1, TPS to 0.01/s,
MB/s and percent to 4 places)."""
from __future__ import annotations

import csv

from valkeytrace.analysis.report import ReportInput
from valkeytrace.analysis.tables import METRICS

DIGITS = {"tps": 2, "mb_s": 4, "p50_us": 1, "p95_us": 1, "p99_us": 1}


def _r(metric: str, v, digits: int | None = None):
    return "" if v is None else round(float(v), DIGITS[metric] if digits is None else digits)


def render(inp: ReportInput, out) -> None:
    w = csv.writer(out)
    header = ["system", "workload", "value_size", "op", "role", "clients", "n"]
    header += list(METRICS) + [f"{m}_min" for m in METRICS] + [f"{m}_max" for m in METRICS]
    header += [f"{m}_significant" for m in METRICS]
    w.writerow(header)
    blank = [""] * len(METRICS)
    for run in inp.runs:
        for cell in run.cells:
            for op, o in cell.ops.items():
                spread = [o.spread[m] or [None, None] for m in METRICS]
                w.writerow([run.label, cell.workload, cell.value_size, op, o.role, o.clients, o.n,
                            *[_r(m, o.median[m]) for m in METRICS], *[_r(m, s[0]) for m, s in zip(METRICS, spread)],
                            *[_r(m, s[1]) for m, s in zip(METRICS, spread)], *blank])
    if inp.comparison is not None:
        for r in inp.comparison.rows:
            sig = [r.significant[m] for m in METRICS]
            w.writerow(["delta_pct", r.workload, r.value_size, r.op, r.base.role, r.base.clients, f"{r.base.n}/{r.cand.n}",
                        *[_r(m, r.deltas[m], 4) for m in METRICS], *blank, *blank,
                        *["" if x is None else str(x).lower() for x in sig]])
