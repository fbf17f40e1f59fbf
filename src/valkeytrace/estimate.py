"""How long a recording plan takes, from what earlier recordings on this host measured: each
launch's cost (server start, tracer start: eBPF compiles its probes) and each run's cost beyond its
measured window (calibration, keyspace fill, the what-if's passes, window bookkeeping), by backend
and workload, kept in the cache directory. Before any recording, conservative figures measured on
this project's VM stand in (the estimate says which). record --dry-run and compare --dry-run print
it; compare's progress bar counts down from it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from valkeytrace import system
from valkeytrace.recording import document

# seconds, measured here (2-CPU VM, 2026-12-02) before any cache exists
DEFAULT_LAUNCH_S = {"ebpf": 7.0, "both": 8.0, "shim": 2.0, "none": 1.5}
DEFAULT_OVERHEAD_S = {"read-heavy": 4.0, "write-only": 1.8, "none": 0.2}
KEEP = 0.7  # exponential smoothing: the new measurement's weight is 1 - KEEP


def _path() -> str:
    return os.path.join(system.cache_dir(), "costs.json")


def measured() -> dict:
    try:
        with open(_path()) as f:
            d = json.load(f)
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


@dataclass
class Estimate:
    seconds: float
    per_launch_s: float
    launches: int
    runs: int
    measured: bool  # whether the costs come from this host


def remember(backend: str, launch_s: float | None, runs: list[dict]) -> None:
    """Fold one recording's costs into the cache (a launch, and each finished run's time beyond
    its window)."""
    d = measured()
    def fold(key, value):
        old = d.get(key)
        d[key] = round(value if old is None else KEEP * old + (1 - KEEP) * value, 3)
    if launch_s is not None:
        fold(f"launch_s:{backend}", launch_s)
    for r in document.outcomes({"runs": runs}):
        if r.status == "ok" and r.started_at and r.ended_at and r.window_start and r.window_end:
            fold(f"overhead_s:{r.workload}", (r.ended_at - r.started_at) - (r.window_end - r.window_start))
    system.write_json_cache(_path(), d)


def estimate(backend: str, matrix: list, duration_s: float, launches: int = 1) -> Estimate:
    """The plan's time, from this host's costs (else the project VM's)."""
    d = measured()
    launch = d.get(f"launch_s:{backend}", DEFAULT_LAUNCH_S.get(backend, 5.0))
    known = f"launch_s:{backend}" in d
    per_launch = launch
    for _, workload, *_ in matrix:
        over = d.get(f"overhead_s:{workload}")
        known = known and over is not None
        per_launch += duration_s + (over if over is not None else DEFAULT_OVERHEAD_S.get(workload, 2.0))
    return Estimate(per_launch * launches, per_launch, launches, len(matrix) * launches, known)


def describe(e: Estimate) -> str:
    m, s = divmod(int(round(e.seconds)), 60)
    h, m = divmod(m, 60)
    took = f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s" if m else f"{s} s"
    return (f"about {took} ({e.launches} launch(es), {e.runs} run(s); "
            + ("costs measured on this host by earlier recordings)" if e.measured
               else "costs of this project's VM: no recording here yet)"))
