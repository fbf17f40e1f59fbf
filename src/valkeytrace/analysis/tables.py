"""The #4029 tables from recordings: medians of repeats per cell, and deltas between two systems.

Conventions (those of valkey#4029):
  - a cell is (workload, value size); each metric is the median of its repeats (numpy median);
  - MB/s = TPS x value bytes / 10^6;
  - delta = (candidate - baseline) / baseline x 100; TPS and MB/s positive = better,
    latencies negative = better;
  - a delta is "within noise" when the min-max ranges of the two sides' repeats overlap
    (with n = 1 on either side, nothing can be called significant: also flagged).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from valkeytrace.analysis.server import summarize_server

WORKLOADS = ("read-heavy", "write-only", "none")
MEASURED_OP = {"read-heavy": "GET", "write-only": "SET"}
OPS_BY_WORKLOAD = {"read-heavy": ("GET", "SET"), "write-only": ("SET",), "none": ()}
METRICS = ("tps", "mb_s", "p50_us", "p95_us", "p99_us")
HIGHER_IS_BETTER = {"tps": True, "mb_s": True, "p50_us": False, "p95_us": False, "p99_us": False}


@dataclass
class OpSummary:
    op: str
    role: str            # "measured" or "background"
    clients: int | None
    n: int
    median: dict         # metric -> median (None when no repeat had it)
    spread: dict         # metric -> [min, max] or None
    values: dict = field(default_factory=dict)  # metric -> list of per-repeat values

    def get(self, metric):
        return self.median.get(metric)


@dataclass
class CellSummary:
    workload: str
    value_size: int
    repeats: int         # successful repeats
    failed: int
    ops: dict            # op -> OpSummary
    server: dict | None = None  # analysis.server.summarize_server of the ok repeats


def _op_values(run: dict, op: str, size: int) -> dict | None:
    res = run.get("ops", {}).get(op)
    if not res or res.get("tps") is None:
        return None
    tps = float(res["tps"])
    return {"tps": tps, "mb_s": tps * size / 1e6, "p50_us": res.get("p50_us"), "mean_us": res.get("mean_us"),
            "p95_us": res.get("p95_us"), "p99_us": res.get("p99_us"),
            "_role": res.get("role", "measured"), "_clients": res.get("clients")}


def summarize(doc: dict) -> list[CellSummary]:
    """One CellSummary per (workload, value_size) present in the recording, in matrix order."""
    order: list[tuple[str, int]] = []
    groups: dict[tuple[str, int], list[dict]] = {}
    failed: dict[tuple[str, int], int] = {}
    for run in doc.get("runs", []):
        key = (run["workload"], int(run["value_size"]))
        if run["workload"] not in OPS_BY_WORKLOAD:
            continue
        if key not in groups:
            order.append(key)
            groups[key] = []
            failed[key] = 0
        if run.get("status") == "ok":
            groups[key].append(run)
        else:
            failed[key] += 1
    cells = []
    for key in sorted(order, key=lambda k: (WORKLOADS.index(k[0]), k[1])):
        workload, size = key
        ops = {}
        for op in OPS_BY_WORKLOAD[workload]:
            rows = [v for v in (_op_values(r, op, size) for r in groups[key]) if v]
            if not rows:
                continue
            values = {m: [r[m] for r in rows if r.get(m) is not None] for m in METRICS + ("mean_us",)}
            ops[op] = OpSummary(
                op=op, role=rows[0]["_role"], clients=rows[0]["_clients"], n=len(rows),
                median={m: float(np.median(v)) if v else None for m, v in values.items()},
                spread={m: [float(min(v)), float(max(v))] if v else None for m, v in values.items()},
                values=values)
        server = summarize_server([r.get("server") for r in groups[key]])
        cells.append(CellSummary(workload, size, len(groups[key]), failed[key], ops, server))
    return cells


def delta_pct(base: float | None, cand: float | None) -> float | None:
    if base is None or cand is None or base == 0:
        return None
    return (cand - base) / base * 100.0


def within_noise(a: OpSummary, b: OpSummary, metric: str) -> bool:
    """True when the change of metric cannot be told from repeat-to-repeat spread."""
    ra, rb = a.spread.get(metric), b.spread.get(metric)
    if ra is None or rb is None:
        return True
    if a.n < 2 or b.n < 2:
        return True
    return ra[0] <= rb[1] and rb[0] <= ra[1]


@dataclass
class CompareRow:
    workload: str
    op: str
    value_size: int
    base: OpSummary
    cand: OpSummary
    deltas: dict   # metric -> pct or None
    noise: dict    # metric -> bool


@dataclass
class Comparison:
    rows: list
    missing: list  # human sentences: cells or ops one side lacks


def compare(base_cells: list[CellSummary], cand_cells: list[CellSummary],
            base_label: str = "baseline", cand_label: str = "candidate") -> Comparison:
    bmap = {(c.workload, c.value_size): c for c in base_cells}
    cmap = {(c.workload, c.value_size): c for c in cand_cells}
    rows, missing = [], []
    for key in sorted(set(bmap) | set(cmap), key=lambda k: (WORKLOADS.index(k[0]), k[1])):
        if key not in bmap or key not in cmap:
            who = base_label if key not in bmap else cand_label
            missing.append(f"{key[0]} {key[1]} B: not in {who}")
            continue
        b, c = bmap[key], cmap[key]
        for op in OPS_BY_WORKLOAD[key[0]]:
            if op not in b.ops or op not in c.ops:
                if op == MEASURED_OP[key[0]]:
                    who = base_label if op not in b.ops else cand_label
                    missing.append(f"{key[0]} {key[1]} B {op}: no successful run in {who}")
                continue
            bo, co = b.ops[op], c.ops[op]
            rows.append(CompareRow(key[0], op, key[1], bo, co,
                                   {m: delta_pct(bo.get(m), co.get(m)) for m in METRICS},
                                   {m: within_noise(bo, co, m) for m in METRICS}))
    return Comparison(rows, missing)
