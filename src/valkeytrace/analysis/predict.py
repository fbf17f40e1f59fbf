"""Predictions from one recording: the pipeline model (valkeytrace.pipeline), calibrated from the
recording (analysis/calibration.py), run with the settings a user wants to change, each figure with
a 90% interval for one recording of the same shape as the baseline's (analysis/intervals.py).

A Change names what differs from the recording: the offload (durable or early-ack, or none: back to
the main thread), its gather window, the fsync delay per call (a new --inject-fsync-delay: the
recorded calls keep their own disk time, the recorded delay is replaced), and the client counts.

The interval: SIM_RUNS simulated windows of the recording's length, each with one of the baseline's
GET-only passes' CPU costs and one of its windows' calls and stalls, drawn; a recording of the same
shape takes the median of as many such windows as the baseline's repeats; moved, as a whole, by what
the baseline shows that the draws do not: the host's speed (its passes' CPU per request moved, and the
model says how far that moves each figure: speed_shift), how far its repeated windows moved, at least as
far as every load it repeated moved (host_floor), and the model's own miss on the baseline as recorded
(self_check).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import msgspec
import numpy as np

from valkeytrace.analysis.calibration import Calibration, CalibrationError, Input, Measured, calibrate, groups_for, rates_of
from valkeytrace.analysis.calls import NO_FSYNC_INTERVAL_US
from valkeytrace.analysis.intervals import LEVEL, Spread, model_sd, pooled_miss, shift_sd, spread
from valkeytrace.pipeline.params import Group, Params, Sampler, ServerCosts, SimResult
from valkeytrace.recording.model import Document, FsyncDelay, decode, decode_as
from valkeytrace.pipeline.pool import simulate_many
from valkeytrace.pipeline.sim import simulate

FIGURES_CHECKED = ("tps", "p50_us", "p95_us", "p99_us", "mean_us")  # what the self-check reproduces
SIM_RUNS = 12             # simulated windows a prediction draws
ELASTIC_RUNS = 4          # and at each of the host's speeds up and down (speed_shift)
MIN_SIM_S = 1.0           # simulated seconds a window, at least
ONE_COHORT_SHARE = 0.9    # a job carrying this share of the write clients' writes: one cohort
GATHER_GRID_US = (0, 100, 200, 300, 400, 500, 600, 800, 1000, 1250, 1500, 2000, 2500, 3000, 4000)
DRAW_SEED = 17


@dataclass(frozen=True)
class Change:
    offload: str | None = None        # "durable", "early-ack", "none" (the main thread fsyncs); None: as recorded
    gather_us: float | None = None    # the durable offload's gather window; None: as recorded
    design: str | None = None         # the offload's hand-off (record --offload-design); None: as recorded
    fsync_delay: object = None        # the new delay (recording.model.FsyncDelay, or its dict: parse_fsync_delay's;
    #                                   {} or an empty one for none); None: as recorded
    get_clients: int | None = None
    set_clients: int | None = None
    write_clients: int | None = None
    rate: float | None = None         # open loop: the measured op's requests due per second
    job_interval_us: float | None = None  # jobs at most this often (appendfsync everysec: 1 s)
    io_threads: int | None = None     # valkey's io-threads (1: none; 2: one I/O thread); None: as recorded

    def describe(self) -> dict:
        return {k: (msgspec.to_builtins(v) if isinstance(v, msgspec.Struct) else v)
                for k, v in self.__dict__.items() if v is not None}


@dataclass
class PredictedOp:
    """One op's simulated figures as a recording of the baseline's shape reports them: each the median
    of the interval's distribution, with the interval (metric -> [lo, hi])."""
    clients: int
    role: str                     # measured or background
    tps: float | None = None
    p50_us: float | None = None
    p95_us: float | None = None
    p99_us: float | None = None
    mean_us: float | None = None
    rate: float | None = None     # open loop: offered per second
    saturated: bool | None = None  # open loop: as most simulated windows were
    offered_rate: float | None = None
    achieved_rate: float | None = None
    service_p50_us: float | None = None
    service_p99_us: float | None = None
    interval: dict = field(default_factory=dict)  # metric -> [lo, hi]: LEVEL of one recording's figure
    interval_reason: dict = field(default_factory=dict)  # metric -> why its range is wider than ±WIDE_HALF (words)


@dataclass
class PredictedServer:
    syncs_per_s: float | None
    writes_per_sync: float | None
    iterations_per_s: float | None


@dataclass
class PredictedCell:
    workload: str
    value_size: int
    ops: dict                     # op -> PredictedOp
    server: PredictedServer
    baseline: dict                # op -> the recording's measured figures (calibration.Measured)
    self_check: dict              # op -> PredictedOp: the recording's cell simulated as recorded
    inputs: dict                  # calibration.inputs: name -> Input
    fitted: list = field(default_factory=list)
    rate: float | None = None     # open loop: the measured op's rate predicted (None: closed loop)
    recorded_rate: float | None = None  # the recording's cell it was calibrated from (None: closed loop)
    widening: dict = field(default_factory=dict)  # op -> metric -> {"windows_sd", "speed_sd", "floor_sd", "model_sd"}
    memory: dict = field(default_factory=dict)    # a durable offload: {"held_replies_peak", "held_bytes_peak"}

    def to_json(self) -> dict:
        return {"workload": self.workload, "value_size": self.value_size, "rate": self.rate, "memory": self.memory,
                "recorded_rate": self.recorded_rate, "ops": {k: asdict(v) for k, v in self.ops.items()},
                "server": asdict(self.server), "baseline": {k: asdict(v) for k, v in self.baseline.items()},
                "self_check": {k: asdict(v) for k, v in self.self_check.items()}, "widening": self.widening}


@dataclass
class Prediction:
    cells: list                   # [PredictedCell]
    change: Change
    label: str
    errors: list = field(default_factory=list)   # cells that could not be calibrated: one line each
    replicas: list = field(default_factory=list)  # predict --offload-replicas committed: ReplicaLag per cell

    def to_json(self) -> dict:
        return {"label": self.label, "change": self.change.describe(), "interval_level": LEVEL,
                "cells": [c.to_json() for c in self.cells], "replicas": [asdict(r) for r in self.replicas],
                "model": {"kind": "discrete-event simulation (valkeytrace.pipeline)", "simulated_windows": SIM_RUNS,
                          "interval_level": LEVEL,
                          "cells": {f"{c.workload} {c.value_size}": {
                              "inputs": {k: asdict(v) for k, v in c.inputs.items()}, "fitted": c.fitted,
                              "fitted_count": len(c.fitted)} for c in self.cells},
                          "not_calibrated": self.errors}}


def apply(cal: Calibration, change: Change, p: Params | None = None) -> Params:
    """The calibrated cell's parameters (or one simulated window's, p) with the change made."""
    p = cal.params if p is None else p
    d = p.durability
    mode = d.mode if change.offload is None else ("main" if change.offload == "none" else change.offload)
    gather = d.gather_us if change.gather_us is None else change.gather_us
    sync, stall = d.sync, (d.stall_us, d.stall_period_us)
    if change.fsync_delay is not None:
        new = decode_as(change.fsync_delay or {}, FsyncDelay)
        stall = (float(new.stall_ns or 0) / 1e3, float(new.stall_period_ns or 0) / 1e3)
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
    interval = d.job_interval_us if change.job_interval_us is None else change.job_interval_us
    io = p.io_threads if change.io_threads is None else change.io_threads
    server = _io_costs(p.server, cal.exec_us) if io > 1 and p.io_threads == 1 else p.server
    return replace(p, groups=groups, server=server, io_threads=io, durability=replace(d, mode=mode, gather_us=gather, sync=sync,
                                                        job_interval_us=interval, stall_us=stall[0],
                                                        stall_period_us=stall[1], design=change.design or d.design),
                   duration_s=max(p.duration_s, MIN_SIM_S))


def _io_costs(s: ServerCosts, exec_us: float | None) -> ServerCosts:
    """A cell recorded without I/O threads, given one: the main thread keeps each command's execution (a
    GET's: exec_us, INFO commandstats; another op's adds its extra, as fitting.cost_params), the I/O thread
    reads the rest of the read and writes the reply. Without commandstats the main thread keeps the whole
    read (the I/O thread writes only)."""
    base = min(s.read_us.values())  # a GET's read: another op's is the same and its extra
    ex = base if exec_us is None else min(base, exec_us)
    return replace(s, exec_us={op: ex + r - base for op, r in s.read_us.items()}, io_read_us=base - ex,
                   io_write_us=s.write_us)


FIGURES = ("tps", "p50_us", "p95_us", "p99_us", "mean_us", "offered_rate", "achieved_rate", "service_p50_us",
           "service_p99_us")


def simulate_windows(cal: Calibration, change: Change | None, n: int = SIM_RUNS, cpu: float = 1.0) -> list[SimResult]:
    """n simulated windows of the cell (as recorded when change is None), each with its own draw of a
    pass's costs and a window's calls and stalls (Calibration.variant), every CPU cost times `cpu`; seeded:
    the same figures each time (and the same draws at every `cpu`)."""
    rng = np.random.default_rng(DRAW_SEED)
    jobs = []
    for k in range(n):
        p = cal.variant(rng)
        if cpu != 1.0:
            p = replace(p, server=_scaled(p.server, cpu), client=replace(p.client, read_us=p.client.read_us * cpu,
                                                                          write_us=p.client.write_us * cpu))
        jobs.append((apply(cal, change or Change(), p), k + 1))
    return simulate_many(jobs)  # drawn here in order, each seeded: the same windows on any number of CPUs


def _scaled(s, f: float):
    return replace(s, read_us={k: v * f for k, v in s.read_us.items()}, write_us=s.write_us * f,
                   exec_us={k: v * f for k, v in s.exec_us.items()}, io_read_us=s.io_read_us * f,
                   io_write_us=s.io_write_us * f, deliver_us=s.deliver_us * f, iteration_us=s.iteration_us * f)


def host_floor(cal: Calibration, metric: str = "tps") -> float:
    """The least a recording's figures move from the baseline's: how far each fixed load the baseline
    repeated moved (its GET-only passes' rate and each cell's over its windows, pooled: intervals.shift_sd;
    for a p99 the larger of that and how far the cells' p99s moved over their windows: a tail moves more
    than a rate; a short GET-only pass's p99 is one hiccup's, so the passes' are left out).
    Inside one recording nothing shows how far the next recording (another launch, minutes later) moves, so
    no figure's range is narrower than the host's own movement under the loads it was seen under (a host
    that ran two passes of three at half the GET rate, as this VM once did, widens every range a lot)."""
    rate = shift_sd(cal.host.get("tps", []))
    if metric != "p99_us":
        return rate
    tails = [g for name, g in zip(cal.host.get("names", []), cal.host.get("p99_us", [])) if name == "cell"]
    return max(rate, shift_sd(tails))


def speed_shift(cal: Calibration, change: Change | None) -> dict:
    """op -> metric -> how far the host's speed moves the figure (the SD of its log): the cell simulated
    with every CPU cost moved up and down by the host's speed shift (intervals.shift_sd of the host's CPU per
    request over every fixed load the baseline repeated, its GET-only passes and each cell's windows, each
    about its own mean: continuous, where the clients' latency figures are bucketed), half the log distance
    between the two medians. A figure the fsync paces barely moves; a CPU-bound one moves with it."""
    sigma = shift_sd(cal.host.get("cpu") or [cal.cpu_per_request])
    if not sigma:
        return {}
    hi, lo = (per_window(simulate_windows(cal, change, ELASTIC_RUNS, float(np.exp(x)))) for x in (sigma, -sigma))
    out: dict = {}
    for op in hi:
        for k, vals in hi[op][1].items():
            a, b = [v for v in vals if v], [v for v in lo.get(op, (None, {}))[1].get(k, []) if v]
            if a and b:
                out.setdefault(op, {})[k] = float(abs(np.log(np.median(a) / np.median(b)))) / 2
    return out


def per_window(results: list[SimResult]) -> dict:
    """op -> (group role, metric -> [each window's figure])."""
    out: dict = {}
    for which, role in (("ops", "measured"), ("background", "background")):
        for op in getattr(results[0], which):
            figs = [getattr(r, which)[op].figures() for r in results if op in getattr(r, which)]
            out[op] = (role, {k: [f[k] for f in figs if f.get(k) is not None] for k in FIGURES})
    return out


def summarise(cal: Calibration, p: Params, results: list[SimResult], widen: dict | None = None) -> dict:
    """The windows as a recording of the baseline's shape reports them: op -> its figures and interval
    (intervals.spread), moved by widen[op][metric] (the host's shift, model_sd)."""
    ops = {}
    rng = np.random.default_rng(DRAW_SEED + 1)
    for op, (role, figs) in per_window(results).items():
        g = next(x for x in p.groups if x.op == op)
        o = PredictedOp(g.clients, role)
        for k, vals in figs.items():
            sd = (widen or {}).get(op, {}).get(k) or (0.0, 0.0)
            s: Spread = spread(vals, cal.repeats, sd[0], sd[1], rng, LEVEL)
            setattr(o, k, s.point)
            if s.lo is not None and k in ("tps", "p50_us", "p95_us", "p99_us"):
                o.interval[k] = [s.lo, s.hi]
        if g.rate:  # open loop: saturated as most windows were
            which = "ops" if role == "measured" else "background"
            opens = [getattr(r, which)[op].open for r in results]
            o.rate, o.saturated = g.rate, sum(bool(x and x.saturated) for x in opens) * 2 > len(results)
        ops[op] = o
    return ops


def _server(results: list[SimResult]) -> PredictedServer:
    def med(xs):
        xs = [x for x in xs if x is not None]
        return round(float(np.median(xs)), 1) if xs else None
    return PredictedServer(med([r.syncs_per_s for r in results]), med([r.writes_per_sync for r in results]),
                           med([r.iterations_per_s for r in results]))


def cells_of(doc) -> list[tuple[str, int]]:
    seen = []
    for r in decode(doc).runs:
        key = (r.workload, r.value_size)
        if r.status == "ok" and key[0] in ("read-heavy", "write-only") and key not in seen:
            seen.append(key)
    return seen


@dataclass
class SelfCheck:
    """The recording's cell simulated as recorded: its figures, and what it says of the model and the host."""
    ops: dict                     # op -> PredictedOp
    widen: dict                   # op -> metric -> (the windows' shift, model_sd)


def self_check(cal: Calibration) -> SelfCheck:
    """The recording's cell simulated as recorded; per op and metric, how far the baseline's repeated
    windows moved (shift_sd: each cell's over its windows, its TPS for a TPS, its p50 for a latency) and the
    model's miss on the cell's median (model_sd, at least a pooled miss: intervals.pooled_miss)."""
    results = simulate_windows(cal, None)
    ops = summarise(cal, apply(cal, Change()), results)
    widen: dict = {}
    cells = {k: [g for name, g in zip(cal.host.get("names", []), cal.host.get(k, [])) if name == "cell"]
             for k in ("tps", "p50_us")}
    for op in ops:
        measured, runs = cal.measured.get(op) or Measured(), cal.per_run.get(op, {})
        misses = {k: model_sd(getattr(measured, k), getattr(ops[op], k)) for k in FIGURES_CHECKED}
        seen = {k: m for k, m in misses.items() if getattr(measured, k) and getattr(ops[op], k)}
        # a latency: the op's latencies' misses; the rate: its own and the mean latency's (a closed loop's
        # rate is its clients over the mean latency: one miss seen twice, the mean not fitted)
        pooled = {"tps": pooled_miss(m for k, m in seen.items() if k in ("tps", "mean_us")),
                  "latency": pooled_miss(m for k, m in seen.items() if k != "tps")}
        for k in FIGURES_CHECKED:
            groups = cells["tps" if k == "tps" else "p50_us"] or [runs.get(k, [])]
            widen.setdefault(op, {})[k] = (shift_sd(groups), max(misses[k], pooled["tps" if k == "tps" else "latency"]))
    return SelfCheck(ops, widen)


def predict_cell(cal: Calibration, change: Change, recorded_rate: float | None = None,
                 own: SelfCheck | None = None) -> PredictedCell:
    own = self_check(cal) if own is None else own
    results = simulate_windows(cal, change)
    speed = speed_shift(cal, change)
    floor = {k: host_floor(cal, k) for k in FIGURES_CHECKED}
    widen = {op: {k: (max(float(np.hypot(v[0], speed.get(op, {}).get(k, 0.0))), floor[k]), v[1]) for k, v in m.items()}
             for op, m in own.widen.items()}
    ops = summarise(cal, apply(cal, change), results, widen)
    rate = change.rate or recorded_rate
    widening = {op: {k: {"windows_sd": round(v[0], 4), "speed_sd": round(speed.get(op, {}).get(k, 0.0), 4),
                         "floor_sd": round(floor[k], 4), "model_sd": round(v[1], 4)} for k, v in m.items()}
                for op, m in own.widen.items()}
    draws = per_window(results)
    for op, o in ops.items():
        for k, (lo, hi) in o.interval.items():
            point = getattr(o, k)
            w = own.widen.get(op, {}).get(k)
            if point and (hi - lo) / point > 2 * WIDE_HALF and w:
                o.interval_reason[k] = interval_reason(op, k, w[0], speed.get(op, {}).get(k, 0.0), floor[k], w[1],
                                                       _draws_sd(draws.get(op, (None, {}))[1].get(k, []), cal.repeats))
    return PredictedCell(cal.workload, cal.value_size, ops, _server(results), baseline=cal.measured,
                         self_check=own.ops, inputs={**cal.inputs, **change_inputs(cal, change)}, fitted=list(cal.fitted), rate=rate,
                         recorded_rate=recorded_rate, widening=widening, memory=_memory(results))


WIDE_HALF = 0.35  # a range wider than ±35% of its point says why (interval_reason)


def _draws_sd(vals: list, repeats: int) -> float:
    """How far the median of a recording's repeats moves between simulated windows (SD of its log): the
    windows' own SD over the root of the repeats, times the median's efficiency (sqrt(pi / 2))."""
    x = np.log([v for v in vals if v and v > 0])
    return float(np.std(x, ddof=1) * 1.2533 / np.sqrt(max(1, repeats))) if len(x) > 1 else 0.0


def interval_reason(op: str, metric: str, windows_sd: float, speed_sd: float, floor_sd: float, model_sd: float,
                    draws_sd: float) -> str:
    """The largest of what widened a range (predict_cell's widening, in its order, and the simulated windows'
    own spread), in words a user can act on."""
    host = float(np.hypot(windows_sd, speed_sd))
    parts = {"draws": draws_sd, "model": model_sd,
             "floor" if floor_sd >= host else ("windows" if windows_sd >= speed_sd else "speed"): max(host, floor_sd)}
    which = max(parts, key=lambda k: parts[k])
    pct = f"{(np.exp(parts[which]) - 1) * 100:.0f}%"
    name = f"{op} {metric.replace('_us', '').upper() if metric != 'tps' else 'TPS'}"
    return {
        "draws": f"the baseline's own passes and windows disagree: simulated from each, a recording's {name} moves "
                 f"{pct} (one of them ran slower, e.g. on another path); a baseline whose repeats agree (a quieter "
                 "host, more --repeat) narrows it",
        "model": f"the model missed the baseline's own {op} figures by {pct} when it simulated the baseline as "
                 "recorded (self_check): it reproduces this cell poorly; a baseline recorded nearer the setting "
                 "predicted narrows it",
        "windows": f"the baseline's repeated windows of this cell moved {pct} between them: record the baseline with "
                   "more --repeat, on a quieter host",
        "speed": f"the host's CPU per request moved {pct} across the baseline's GET-only passes and windows, and this "
                 "figure moves with the CPU: record the baseline with nothing else running (pinned CPUs)",
        "floor": f"the host itself moved {pct} under the loads the baseline repeated (its GET-only passes' rates, "
                 "its cells' windows): record the baseline on a quieter host, or with more --repeat",
    }[which]


def change_inputs(cal: Calibration, change: Change) -> dict:
    """What a changed setting stands on that the baseline does not show: name -> Input, with its source."""
    out: dict = {}
    if change.job_interval_us is not None and change.job_interval_us != cal.params.durability.job_interval_us:
        if change.job_interval_us >= NO_FSYNC_INTERVAL_US:
            out["job_interval_us"] = Input("never", "", "appendfsync no: the server never fdatasyncs the AOF (the "
                                           "kernel's own writeback of it is not modelled); its write() stays on the "
                                           "main thread")
        else:
            out["job_interval_us"] = Input(change.job_interval_us, "µs", "appendfsync everysec: the bio_aof thread's "
                                           "fdatasync at most once a second (valkey's aof.c, not in the baseline); "
                                           "each one of the baseline's own calls")
            out["everysec_postponed_writes"] = Input("not modelled", "", "everysec postpones the main thread's AOF "
                                                     "write() while a bio fdatasync runs (up to 2 s): not in an "
                                                     "appendfsync always baseline")
    was = cal.params.io_threads
    if change.io_threads is not None and change.io_threads != was:
        out["io_threads"] = Input(change.io_threads, "", "--io-threads: the model has one I/O thread (io-threads 2) "
                                  "reading each request and writing its reply, or none")
        if change.io_threads > 1 and was == 1:
            out["exec_us_get"] = Input(cal.exec_us, "µs", "INFO commandstats usec_per_call of GET over the baseline's "
                                       "windows: what the main thread keeps of a request under I/O threads (the I/O "
                                       "thread reads the rest and writes the reply)") if cal.exec_us is not None else \
                Input("not measured", "", "no commandstats in the baseline: the main thread keeps the whole read")
            out["io_handoff_us"] = Input(0.0, "µs", "not in the baseline (it ran without an I/O thread): the main "
                                         "thread's hand-off of a request to the I/O thread and back, taken as 0")
        if change.io_threads == 1 and was > 1:
            out["io_thread_polling"] = Input("counted", "", "the baseline's I/O thread polls on a CPU whatever the load "
                                             "(on a CPU most of each window): server_us_per_get counts it, and without "
                                             "an I/O thread that CPU is not spent; not separable in the baseline")
    return out


REPLY_BYTES = len(b"+OK\r\n")  # a held reply is a write's: valkey's output buffer holds its "+OK"


def _memory(results: list[SimResult]) -> dict:
    """What a durable offload holds at its peak (the simulated windows' median): replies held until durable,
    and their bytes as the server's output buffers hold them."""
    peaks = [r.held_peak for r in results]
    if not any(peaks):
        return {}
    held = int(np.median(peaks))
    return {"held_replies_peak": held, "held_bytes_peak": held * REPLY_BYTES}


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


@dataclass
class ReplicaLag:
    """The replica lag of a recording whose stream left at once, were it held until durable (committed)."""
    workload: str
    value_size: int
    lag_p50_us: float | None            # as recorded
    predicted_lag_p50_us: float | None  # committed: each write's durability wait plus its link transit


def replica_lag(doc: dict | Document, cells: list) -> list[ReplicaLag]:
    """predict --offload-replicas committed: from the kernel's view of each replicated cell (replication)."""
    from valkeytrace.analysis.replication import replication

    rec = decode(doc)
    out = []
    for workload, size in cells:
        runs = [r for r in rec.runs if r.status == "ok" and r.workload == workload and r.value_size == size
                and r.replicas and (r.load is None or r.load.rate is None)]
        r = replication(runs, []) if runs else None
        if r is not None and r.lag_p50_us is not None:
            out.append(ReplicaLag(workload, size, r.lag_p50_us, r.committed_lag_p50_us))
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


__all__ = ["Change", "Input", "PredictedCell", "PredictedOp", "Prediction", "apply", "predict", "predict_cell",
           "self_check", "one_cohort_window", "cells_of", "LEVEL"]
