"""Predictions from one recording: the pipeline model (valkeytrace.pipeline), calibrated from the
recording (analysis/calibration.py), run with the settings a user wants to change.

A Change names what differs from the recording: the offload (durable or early-ack, or none: back to
the main thread), its gather window, the fsync delay per call (a new --inject-fsync-delay: the
recorded calls keep their own disk time, the recorded delay is replaced), and the client counts.
Each predicted cell comes with the same cell simulated as recorded (self_check: the model against
the measurement it was calibrated from, where only the stall rate was fitted).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import msgspec
import numpy as np

from valkeytrace.analysis.calibration import Calibration, CalibrationError, Input, calibrate, groups_for, rates_of
from valkeytrace.analysis.modes import weighted
from valkeytrace.pipeline.params import Group, Params, Sampler, SimResult
from valkeytrace.recording.model import Document, FsyncDelay, decode, decode_as
from valkeytrace.pipeline.sim import simulate

REPLICATES = 3            # simulated runs a prediction takes the median of (as a cell, of its repeats)
MIN_SIM_S = 1.0           # simulated seconds a run, at least
ONE_COHORT_SHARE = 0.9    # a job carrying this share of the write clients' writes: one cohort
GATHER_GRID_US = (0, 100, 200, 300, 400, 500, 600, 800, 1000, 1250, 1500, 2000, 2500, 3000, 4000)
# The virtual offload's own CPU in the server per request (the shim parses each request and frames each
# reply): the GET-only passes' server CPU per GET with the emulation on against off, in the same mode of the
# host (analysis/modes.py): 9.09 against 8.48 µs in the fast mode (27 and 9 passes), 10.78 against 9.86 in
# the slow one (10 and 3), 13 and 4 recordings on this project's 2-CPU VM (docs/explain.md §3). Taken across modes,
# as it was before the modes were seen, it read 1.3 µs: more passes of the emulation's side had run slow.
# benchmarks/offload_cost.py times the shim's part alone at 0.3-0.6 µs, in a loop that keeps it in cache. A
# recording cannot show it (the emulation is off there), so it is valkeytrace's figure of its own cost.
EMULATION_US_PER_REQUEST = 0.7


@dataclass(frozen=True)
class Change:
    offload: str | None = None        # "durable", "early-ack", "none" (the main thread fsyncs); None: as recorded
    gather_us: float | None = None    # the durable offload's gather window; None: as recorded
    fsync_delay: object = None        # the new delay (recording.model.FsyncDelay, or its dict: parse_fsync_delay's;
    #                                   {} or an empty one for none); None: as recorded
    get_clients: int | None = None
    set_clients: int | None = None
    write_clients: int | None = None
    rate: float | None = None         # open loop: the measured op's requests due per second
    job_interval_us: float | None = None  # jobs at most this often (appendfsync everysec: 1 s)
    emulated: bool = True             # an offload turned on is valkeytrace's virtual one (it costs the server CPU)

    def describe(self) -> dict:
        return {k: (msgspec.to_builtins(v) if isinstance(v, msgspec.Struct) else v)
                for k, v in self.__dict__.items() if v is not None}


@dataclass
class PredictedCell:
    workload: str
    value_size: int
    ops: dict                     # op -> PredictedOp
    server: "PredictedServer"
    baseline: dict                # op -> the recording's measured figures (calibration.Measured)
    self_check: dict              # op -> PredictedOp: the recording's cell simulated as recorded
    inputs: dict                  # calibration.inputs: name -> Input
    fitted: list = field(default_factory=list)
    rate: float | None = None     # open loop: the measured op's rate predicted (None: closed loop)
    recorded_rate: float | None = None  # the recording's cell it was calibrated from (None: closed loop)
    modes: dict = field(default_factory=dict)  # name -> ModePrediction, when the host ran in two (run_change)

    def to_json(self) -> dict:
        return {"workload": self.workload, "value_size": self.value_size, "rate": self.rate,
                "recorded_rate": self.recorded_rate, "ops": {k: asdict(v) for k, v in self.ops.items()},
                "modes": {k: v.to_json() for k, v in self.modes.items()},
                "server": asdict(self.server), "baseline": {k: asdict(v) for k, v in self.baseline.items()},
                "self_check": {k: asdict(v) for k, v in self.self_check.items()}}


@dataclass
class Prediction:
    cells: list                   # [PredictedCell]
    change: Change
    label: str
    errors: list = field(default_factory=list)   # cells that could not be calibrated: one line each

    def to_json(self) -> dict:
        return {"label": self.label, "change": self.change.describe(),
                "cells": [c.to_json() for c in self.cells],
                "model": {"kind": "discrete-event simulation (valkeytrace.pipeline)", "replicates": REPLICATES,
                          "cells": {f"{c.workload} {c.value_size}": {"inputs": {k: asdict(v) for k, v in c.inputs.items()},
                                                                     "fitted": c.fitted}
                                    for c in self.cells},
                          "not_calibrated": self.errors}}


def apply(cal: Calibration, change: Change) -> Params:
    """The calibrated cell's parameters with the change made."""
    p = cal.params
    d = p.durability
    mode = d.mode if change.offload is None else ("main" if change.offload == "none" else change.offload)
    gather = d.gather_us if change.gather_us is None else change.gather_us
    sync = d.sync
    if change.fsync_delay is not None:
        new = decode_as(change.fsync_delay or {}, FsyncDelay)
        median_us = float(new.median_ns or 0.0) / 1e3
        shift = -cal.injected_ns / 1e3
        if new.kind == "lognormal" and new.sigma:
            sync = Sampler(sync.values_us, sync.shift_us + shift, sync.floor_us, median_us, float(new.sigma))
        else:
            sync = Sampler(sync.values_us, sync.shift_us + shift + median_us, sync.floor_us)
    groups = p.groups
    if cal.workload == "read-heavy":
        g = next(x for x in groups if x.op == "GET")
        bg = next((x for x in groups if x.op == "SET"), None)
        groups = groups_for("read-heavy", change.get_clients or g.clients,
                            change.set_clients if change.set_clients is not None else (bg.clients if bg else 0), 0)
    elif change.write_clients:
        groups = (Group("SET", change.write_clients),)
    was = next((x for x in p.groups if x.measured), None)  # the calibrated load: closed, or open at a rate
    rate = change.rate or (was.rate if was else None)
    if rate:
        arrival = was.arrival if was else "poisson"
        pool = was.pool if was and was.rate else "fixed"  # a closed loop's clients, now on a schedule
        groups = tuple(replace(x, rate=rate, arrival=arrival, pool=pool) if x.measured else x for x in groups)
    server = p.server
    cost = _emulation_cost(d.mode, mode, change.emulated)
    if cost:
        server = replace(server, read_us={k: max(0.1, v + cost / 2) for k, v in server.read_us.items()},
                         write_us=max(0.1, server.write_us + cost / 2))
    interval = d.job_interval_us if change.job_interval_us is None else change.job_interval_us
    return replace(p, groups=groups, server=server, durability=replace(d, mode=mode, gather_us=gather, sync=sync,
                                                        job_interval_us=interval),
                   duration_s=max(p.duration_s, MIN_SIM_S))


def _emulation_cost(recorded: str, wanted: str, emulated: bool) -> float:
    """µs a request the server gains (or sheds) with the virtual offload turned on (or off)."""
    if recorded == "main" and wanted != "main" and emulated:
        return EMULATION_US_PER_REQUEST
    if recorded != "main" and wanted == "main":
        return -EMULATION_US_PER_REQUEST
    return 0.0


@dataclass
class PredictedOp:
    """One op's simulated figures as a recording reports them (the medians of the replicates)."""
    clients: int
    role: str                     # measured or background
    tps: float | None = None
    p50_us: float | None = None
    p95_us: float | None = None
    p99_us: float | None = None
    mean_us: float | None = None
    rate: float | None = None     # open loop: offered per second
    saturated: bool | None = None  # open loop: as most replicates were
    offered_rate: float | None = None
    achieved_rate: float | None = None
    service_p50_us: float | None = None
    service_p99_us: float | None = None

    def get(self, metric: str):
        return getattr(self, metric, None)


@dataclass
class PredictedServer:
    syncs_per_s: float | None
    writes_per_sync: float | None
    iterations_per_s: float | None


FIGURES = ("tps", "p50_us", "p95_us", "p99_us", "mean_us", "offered_rate", "achieved_rate", "service_p50_us",
           "service_p99_us")


def run(p: Params, replicates: int = REPLICATES) -> tuple[dict, PredictedServer, list[SimResult]]:
    """Simulated figures of p as a recording reports them: `replicates` runs of p.duration_s (as its
    repeats), each metric the median of the runs' own (a rare long fdatasync lands in the p99 of one
    run in several, as in the measured repeats, not in a pooled tail)."""
    results = [simulate(p, seed) for seed in range(1, replicates + 1)]
    ops = {}
    for which, role in (("ops", "measured"), ("background", "background")):
        for op in getattr(results[0], which):
            g = next(x for x in p.groups if x.op == op)
            per = [getattr(r, which)[op] for r in results]
            figs = [x.figures() for x in per]
            o = PredictedOp(g.clients, role)
            for k in FIGURES:
                setattr(o, k, _median([f.get(k) for f in figs]))
            if g.rate:  # open loop: saturated as most replicates were
                o.rate, o.saturated = g.rate, sum(bool(x.open and x.open.saturated) for x in per) * 2 > len(per)
            ops[op] = o
    server = PredictedServer(_median([r.syncs_per_s for r in results]), _median([r.writes_per_sync for r in results]),
                             _median([r.iterations_per_s for r in results]))
    return ops, server, results


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(float(np.median(xs)), 1) if xs else None


def cells_of(doc) -> list[tuple[str, int]]:
    seen = []
    for r in decode(doc).runs:
        key = (r.workload, r.value_size)
        if r.status == "ok" and key[0] in ("read-heavy", "write-only") and key not in seen:
            seen.append(key)
    return seen


def inputs_for(cal: Calibration, change: Change) -> dict:
    """The calibration's inputs, and what the change adds that no recording holds."""
    d = cal.params.durability
    mode = d.mode if change.offload is None else ("main" if change.offload == "none" else change.offload)
    cost = _emulation_cost(d.mode, mode, change.emulated)
    if not cost:
        return cal.inputs
    return {**cal.inputs, "emulation_us_per_request": Input(
        cost, "µs", "valkeytrace's own: the virtual offload's CPU in the server per request (the GET-only passes "
        "with it on against off in the same mode of the host, 17 recordings on this project's VM: docs/explain.md §3)")}


def run_change(cal: Calibration, change: Change) -> tuple[dict, PredictedServer, dict]:
    """The cell as changed (run_modes)."""
    return run_modes(cal, lambda c: apply(c, change))


def run_modes(cal: Calibration, params: Callable[[Calibration], Params]) -> tuple[dict, PredictedServer, dict]:
    """run(params(cal)), in each of the host's modes when its GET-only passes ran in two, each figure
    the modes' weighed by the chance that a cell comes out in each (analysis/modes.py); with each
    mode's own figures."""
    if len(cal.modes) < 2:
        ops, server, _ = run(params(cal))
        return ops, server, {}
    by = {m.cost.name: (m, *run(params(cal.in_mode(m)))[:2]) for m in cal.modes}
    ops = {}
    for op, first in next(iter(by.values()))[1].items():
        o = PredictedOp(first.clients, first.role, rate=first.rate)
        for k in FIGURES:
            setattr(o, k, _round(weighted([(ops_[op].get(k), m.weight) for m, ops_, _ in by.values()])))
        if first.rate:
            o.saturated = sum(m.weight for m, ops_, _ in by.values() if ops_[op].saturated) > 0.5
        ops[op] = o
    server = PredictedServer(*(_round(weighted([(getattr(s, f), m.weight) for m, _, s in by.values()]))
                               for f in ("syncs_per_s", "writes_per_sync", "iterations_per_s")))
    modes = {name: ModePrediction(m.cost.passes, round(m.weight, 3), round(m.cost.server_us, 2),
                                  round(m.cost.client_us, 2), o) for name, (m, o, _) in by.items()}
    return ops, server, modes


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


@dataclass
class ModePrediction:
    """The cell as predicted in one of the host's modes."""
    passes: int                   # the GET-only passes that ran in it
    weight: float                 # the chance a cell comes out in it (modes.weights): its share of the figures
    server_us: float              # its CPU per request: the server's threads
    client_us: float              # and the benchmark clients
    ops: dict                     # op -> PredictedOp

    def to_json(self) -> dict:
        return {"passes": self.passes, "weight": self.weight, "server_us": self.server_us, "client_us": self.client_us,
                "ops": {k: asdict(v) for k, v in self.ops.items()}}


def predict_cell(cal: Calibration, change: Change, recorded_rate: float | None = None,
                 own: dict | None = None) -> PredictedCell:
    ops, server, modes = run_change(cal, change)
    if own is None:
        own = self_check(cal)
    rate = change.rate or recorded_rate
    return PredictedCell(cal.workload, cal.value_size, ops, server, baseline=cal.measured, self_check=own,
                         inputs=inputs_for(cal, change), fitted=list(cal.fitted), rate=rate, recorded_rate=recorded_rate,
                         modes=modes)


def self_check(cal: Calibration) -> dict:
    """The recording's cell simulated as recorded."""
    own, _, _ = run_modes(cal, lambda c: replace(c.params, duration_s=max(c.params.duration_s, MIN_SIM_S)))
    return own


def predict(doc: dict | Document, change: Change, cells: list | None = None, rates: list | None = None) -> Prediction:
    """Each cell (calibrated from its closed loop if recorded, else from its first recorded rate), as
    changed; with rates, once per rate (open loop), the cell's self-check simulated once."""
    rec = decode(doc)
    out = Prediction([], change, rec.label or "baseline")
    for workload, size in cells or cells_of(rec):
        recorded = rates_of(rec, workload, size)
        src = None if None in recorded or not recorded else recorded[0]
        try:
            cal = calibrate(rec, workload, size, src)
        except CalibrationError as exc:
            out.errors.append(f"{workload} {size} B: {exc}")
            continue
        own = self_check(cal)
        for rate in rates or [change.rate]:
            out.cells.append(predict_cell(cal, replace(change, rate=rate), src, own))
    return out


def one_cohort_window(cal: Calibration, change: Change) -> dict:
    """The smallest gather window (µs, from GATHER_GRID_US) under which one job carries (nearly) every
    write client's write: the write-only cell simulated at each window of the grid, in order."""
    if cal.workload != "write-only":
        raise CalibrationError("the gather window is chosen on a write-only cell")
    clients = change.write_clients or next(g.clients for g in cal.params.groups if g.op == "SET")
    tried = []
    for w in GATHER_GRID_US:
        p = apply(cal, replace(change, offload="durable", gather_us=float(w)))
        r = simulate(replace(p, duration_s=1.0), seed=3)
        share = (r.writes_per_sync or 0) / clients
        tried.append({"gather_us": w, "writes_per_job": round(r.writes_per_sync or 0, 1),
                      "set_p50_us": round(r.ops["SET"].p50_us or 0, 1), "set_tps": round(r.ops["SET"].tps, 1)})
        if share >= ONE_COHORT_SHARE:
            return {"gather_us": w, "tried": tried, "clients": clients}
    return {"gather_us": None, "tried": tried, "clients": clients}
