"""Simulated windows side by side, one process per CPU: each window is its own seeded run
(pipeline/sim.simulate: its Params drawn before, its seed given), so the results are the same in any
order and on any number of CPUs. A prediction simulates ~40 windows besides its calibration's: 16 s of CPU
for a read-heavy cell here (8.9 s on two CPUs, 2026-12-06); ~10 s since a request's key and the jitter's coin
are drawn in blocks (pipeline/actors.Uniform; 26.0 -> 14.5 s for the stored two-speed baseline, 2026-12-07).

VALKEYTRACE_SIM_WORKERS=1 runs them in this process (as does a host with one CPU, and a process that is
itself a pool's worker: the what-if spreads its cells over forked workers, analysis/whatif.py)."""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from valkeytrace.pipeline.params import Params, SimResult
from valkeytrace.pipeline.sim import simulate

_POOL: ProcessPoolExecutor | None = None


def _one(job: tuple[Params, int]) -> SimResult:
    return simulate(*job)


def workers() -> int:
    """Processes the windows are spread over: the CPUs this process may run on, or the environment's figure."""
    try:
        return max(1, int(os.environ["VALKEYTRACE_SIM_WORKERS"]))
    except (KeyError, ValueError):
        return len(os.sched_getaffinity(0))


def simulate_many(jobs: list[tuple[Params, int]]) -> list[SimResult]:
    """simulate(params, seed) of each job, in the jobs' order."""
    global _POOL
    n = min(workers(), len(jobs))
    if n < 2 or multiprocessing.parent_process() is not None:  # in a pool's worker already (the what-if's)
        return [_one(job) for job in jobs]
    if _POOL is None:  # spawned, not forked: the caller may hold threads (a tracer's) and locks
        _POOL = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
    try:
        return list(_POOL.map(_one, jobs))
    except BrokenProcessPool:  # a worker could not start (a caller's script read from stdin) or was killed
        _POOL = None
        return [_one(job) for job in jobs]
