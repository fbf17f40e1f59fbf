"""CSV: one row per (system, workload, value size, op), medians with n and spread."""
from __future__ import annotations

import csv

from valkeytrace.analysis.tables import METRICS
from valkeytrace.analysis.report import ReportInput


def render(inp: ReportInput, out) -> None:
    w = csv.writer(out)
    header = ["system", "workload", "value_size", "op", "role", "clients", "n"]
    header += METRICS + tuple(f"{m}_min" for m in METRICS) + tuple(f"{m}_max" for m in METRICS)
    w.writerow(header)
    for run in inp.runs:
        for cell in run.cells:
            for op, o in cell.ops.items():
                spread = [o.spread[m] or [None, None] for m in METRICS]
                w.writerow([run.label, cell.workload, cell.value_size, op, o.role, o.clients, o.n,
                            *[o.median[m] for m in METRICS], *[s[0] for s in spread], *[s[1] for s in spread]])
    if inp.comparison is not None:
        for r in inp.comparison.rows:
            w.writerow(["delta_pct", r.workload, r.value_size, r.op, "", "", "",
                        *[r.deltas[m] for m in METRICS]])
