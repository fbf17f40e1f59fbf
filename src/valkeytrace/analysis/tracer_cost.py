"""What the tracer cost over a cell's windows (runs[].tracer.cost, tracers/bpf_cost.py): the BPF programs'
run time per request the server served, the tracer process's CPU and its peak memory, per program summed."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import msgspec

from valkeytrace.recording.model import BpfProgram


@dataclass
class ProgramRate:
    """One program over a cell's windows."""
    name: str
    attach: str | None
    runs_per_s: float | None
    ns_per_run: float | None
    ns_per_request: float | None


@dataclass
class CellCost:
    windows: int
    bpf_ns_per_request: float | None      # median over the windows
    bpf_ms_per_s: float | None            # the programs' run time a second of window (median)
    tracer_cpu_pct_of_core: float | None  # median
    peak_rss_mb: float | None             # the largest
    programs: list[ProgramRate] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _med(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def _summed(costs: list) -> list[BpfProgram]:
    """Each program's counts summed over the windows' costs, the costliest first."""
    progs: dict[str, BpfProgram] = {}
    for c in costs:
        for p in c.programs:
            acc = progs.setdefault(p.name, BpfProgram(name=p.name, attach=p.attach))
            acc.runs += p.runs
            acc.run_ns += p.run_ns
    return sorted(progs.values(), key=lambda p: -p.run_ns)


def run_cost(runs: list) -> dict | None:
    """A recording's runs[].tracer.cost over all its windows: each program's runs and run ns summed, the
    requests summed, ns per request over them, the process's CPU (median) and peak RSS (the largest)."""
    costs = [r.tracer.cost for r in runs if r.tracer is not None and r.tracer.cost is not None]
    if not costs:
        return None
    progs = _summed(costs)
    requests = sum(c.requests or 0 for c in costs) if all(c.requests is not None for c in costs) else None
    counted = all(c.counted for c in costs)
    run_ns = sum(p.run_ns for p in progs)
    return {"windows": len(costs), "programs": [msgspec.structs.asdict(p) for p in progs], "requests": requests,
            "counted": counted, "bpf_ns_per_request": round(run_ns / requests, 1) if requests and counted else None,
            "tracer_cpu_pct_of_core": _med([c.tracer_cpu_pct_of_core for c in costs]),
            "window_edges_cpu_ms": _med([c.window_edges_cpu_ms for c in costs]),
            "peak_rss_mb": max((c.peak_rss_mb for c in costs if c.peak_rss_mb is not None), default=None)}


def cell_cost(runs: list) -> CellCost | None:
    """The cell's cost from its ok runs (recording.model.Run), or None when no window has one."""
    costs = [(r, r.tracer.cost) for r in runs if r.tracer is not None and r.tracer.cost is not None]
    if not costs:
        return None
    seconds = sum((r.server.window_ns if r.server else 0) for r, _ in costs) / 1e9
    requests = sum(c.requests or 0 for _, c in costs)
    progs = _summed([c for _, c in costs])
    rows = [ProgramRate(p.name, p.attach, round(p.runs / seconds, 1) if seconds else None,
                        round(p.run_ns / p.runs, 1) if p.runs else None,
                        round(p.run_ns / requests, 1) if requests else None) for p in progs]
    per_s = [sum(p.run_ns for p in c.programs) / (r.server.window_ns / 1e3) for r, c in costs
             if r.server and r.server.window_ns and c.counted]
    return CellCost(len(costs), _med([c.bpf_ns_per_request for _, c in costs]), _med(per_s),
                    _med([c.tracer_cpu_pct_of_core for _, c in costs]),
                    max((c.peak_rss_mb for _, c in costs if c.peak_rss_mb is not None), default=None), rows)
