"""The compare report's what-if: the candidate's tables predicted from the baseline alone, by the
pipeline model (analysis/predict.py, calibrated on the baseline's recording), against what the
candidate measured. One code path with `valkeytrace predict`: the candidate's configuration is read
as a Change of the baseline's (its offload or appendfsync, gather window, fsync delay, io-threads 1 or 2,
client counts), and nothing is predicted where the two differ in what the model does not cover (another
build, more than one I/O thread). `predict --appendfsync/--io-threads` read the same way (settings_change).

Each entry (Check): the scenario, the cell and metric, predicted against measured with the prediction's
90% interval for one recording of the baseline's shape, the verdict (the measurement inside or outside
that interval), the point's error and whether it lies within TOLERANCE_PCT (p50 and TPS 15%, p95/p99
40%), and the inputs.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import msgspec

from valkeytrace import environment
from valkeytrace.analysis.calibration import CalibrationError, calibrate
from valkeytrace.analysis.calls import durable_by
from valkeytrace.analysis.intervals import LEVEL
from valkeytrace.analysis.predict import Change, predict_cell
from valkeytrace.analysis.tables import MEASURED_OP, CellSummary, Figures
from valkeytrace.recording.model import Document, FsyncDelay, decode

MODEL_IO_THREADS = 2  # the pipeline model has one I/O thread: io-threads 1 (none) or 2
TOLERANCE_PCT = {"tps": 15.0, "p50_us": 15.0, "p95_us": 40.0, "p99_us": 40.0}
METRICS = tuple(TOLERANCE_PCT)
# a durable offload's memory: the replies it holds at most (a point: no range yet; Little's law's own spread)
HELD_TOLERANCE_PCT = 40.0


def _offload(doc: Document) -> tuple[str, float | None]:
    """Who makes writes durable in a recording (calls.durable_by), as a Change's offload: none, durable,
    early-ack; and everysec's job interval."""
    who = durable_by(doc)
    return ("none" if who.mode == "main" else who.mode), (who.job_interval_us or None)


def _gather_ns(doc: Document) -> float:
    return (doc.emulation.offload.gather_ns if doc.emulation.offload else 0) or 0


def _design(doc: Document) -> str:
    """The offload's --offload-design (bio-write when none was recorded)."""
    return (doc.emulation.offload.design if doc.emulation.offload else None) or "bio-write"


def change_between(base, cand) -> tuple[Change | None, str]:
    """(the Change that makes the baseline's configuration the candidate's, its scenario) or (None, the
    code of why nothing is predicted: the model changes settings, not code; it has one I/O thread at
    most; it is calibrated on appendfsync always; the sides' configurations are one)."""
    base, cand = decode(base), decode(cand)
    bs, cs = base.server, cand.server
    if (bs.version, bs.binary) != (cs.version, cs.binary) and bs.binary:
        return None, "another_build"
    if max(bs.io_threads or 1, cs.io_threads or 1) > MODEL_IO_THREADS and (bs.io_threads or 1) != (cs.io_threads or 1):
        return None, "io_threads_beyond_model"
    if bs.appendfsync not in (None, "always"):
        return None, "baseline_not_always"
    b_mode, _ = _offload(base)
    c_mode, interval = _offload(cand)
    kw: dict = {}
    if c_mode != b_mode:
        kw["offload"] = c_mode
    if interval:
        kw["job_interval_us"] = interval
    b_design, c_design = (_design(x) for x in (base, cand))
    if c_mode == "durable" and c_design != b_design:
        kw["design"] = c_design
    if _gather_ns(cand) != _gather_ns(base):
        kw["gather_us"] = _gather_ns(cand) / 1e3
    bd, cd = base.emulation.fsync_delay, cand.emulation.fsync_delay
    if (bd.median_ns, bd.sigma) != (cd.median_ns, cd.sigma):
        kw["fsync_delay"] = cd if cd.median_ns else FsyncDelay()
    if (bs.io_threads or 1) != (cs.io_threads or 1):
        kw["io_threads"] = cs.io_threads or 1
    for k in ("get_clients", "set_clients", "write_clients"):
        b, c = getattr(base.settings, k), getattr(cand.settings, k)
        if c is not None and c != b:
            kw[k] = c
    if not kw:
        return None, "same_configuration"
    return Change(**kw), scenario_name(kw)


def settings_change(base, appendfsync: str | None = None, io_threads: int | None = None) -> dict:
    """predict --appendfsync/--io-threads: the baseline with those settings as a candidate's, read as a Change
    by change_between (the compare's one path): its keyword arguments ({} when nothing differs). A setting
    the model does not cover raises VTUsageError, one line, by name."""
    from valkeytrace.errors import VTUsageError

    base = decode(base)
    if io_threads is not None and io_threads > MODEL_IO_THREADS:
        raise VTUsageError(f"--io-threads {io_threads}: the model has one I/O thread (--io-threads 1 or "
                           f"{MODEL_IO_THREADS})")
    server = msgspec.structs.replace(base.server, io_threads=io_threads or base.server.io_threads,
                                     appendfsync=appendfsync or base.server.appendfsync,
                                     bio_aof_offload=None if appendfsync else base.server.bio_aof_offload)
    emulation = base.emulation
    if appendfsync and emulation.offload:  # the offload is always's fsync moved: a new appendfsync replaces it
        emulation = msgspec.structs.replace(emulation, offload=None)
    change, why = change_between(base, msgspec.structs.replace(base, server=server, emulation=emulation))
    if change is None and why != "same_configuration":
        raise VTUsageError({"baseline_not_always": f"--appendfsync/--io-threads: the model is calibrated on "
                            f"appendfsync always (with or without an offload); this baseline runs appendfsync "
                            f"{base.server.appendfsync}"}.get(why, f"--appendfsync/--io-threads: not predicted ({why})"))
    return {} if change is None else {k: v for k, v in change.__dict__.items() if v is not None}


def scenario_name(kw: dict) -> str:
    parts = []
    change = Change(**kw)
    if change.offload:
        parts.append({"none": "fsync_on_main_thread", "durable": "fsync_off_main_thread",
                      "early-ack": "fsync_off_main_thread_early_ack"}[change.offload])
    if change.gather_us:
        parts.append("gather_window")
    if change.design:
        parts.append("design")
    if "fsync_delay" in kw:
        parts.append("fsync_delay")
    if change.io_threads:
        parts.append("io_threads")
    if any(k.endswith("_clients") for k in kw):
        parts.append("clients")
    return "+".join(parts)


@dataclass
class Check:
    """compare.whatif[]: one measured op's metric of a candidate cell, predicted from the baseline, with the
    LEVEL interval for one recording of the baseline's shape; verdict: the measurement inside or outside it."""
    scenario: str
    workload: str
    op: str
    value_size: int
    rate: float | None
    metric: str
    predicted: float
    measured: float | None
    error_pct: float | None
    tolerance_pct: float
    verdict: str | None           # "inside" or "outside" the interval (None: nothing measured or no interval)
    inputs: dict
    interval: list | None = None  # [lo, hi]
    level: float = LEVEL
    within_tolerance: bool | None = None  # the point within tolerance_pct of the measurement

    @property
    def key(self) -> tuple:
        return (self.workload, self.op, self.value_size, self.rate, self.metric)

    def to_json(self) -> dict:
        return asdict(self)


def check(base_doc, cand_doc, cand_cells: list[CellSummary]) -> list[Check]:
    """The baseline's prediction of each measured op of the candidate's cells, against the candidate: each
    cell's calibration and simulation (about 2-5 s of CPU) in a process of its own when there are several
    cells and CPUs (the simulations are seeded: the same figures either way)."""
    change, scenario = change_between(base_doc, cand_doc)
    if change is None:
        return []
    cells = [c for c in cand_cells if (op := MEASURED_OP.get(c.workload)) is not None and op in c.ops]
    base_doc = decode(base_doc)
    key = _cache_key(base_doc, cells, change)
    cached = _cached(key)
    if cached is not None:
        return _judge_memory(cached, decode(cand_doc))
    out = _checks(base_doc, cells, change, scenario)
    _keep(key, out)
    return _judge_memory(out, decode(cand_doc))


def _judge_memory(checks: list[Check], cand: Document) -> list[Check]:
    """The predicted held-replies peak against the candidate's measured one (runs[].memory)."""
    from valkeytrace.analysis.memory import cell_memory

    out = []
    for c in checks:
        if c.metric == "held_replies_peak":
            runs = [r for r in cand.runs if r.workload == c.workload and r.value_size == c.value_size
                    and (r.load.rate if r.load else None) == c.rate and r.status == "ok"]
            m = cell_memory(runs)
            got = m.held_replies_peak if m else None
            if got is None:
                continue  # the candidate recorded no memory (older recordings): nothing to judge
            err = round(100.0 * (c.predicted - got) / got, 1) if got else None
            c = replace(c, measured=got, error_pct=err, within_tolerance=None if err is None else abs(err) <= c.tolerance_pct)
        out.append(c)
    return out


def _checks(base_doc: Document, cells: list[CellSummary], change: Change, scenario: str) -> list[Check]:
    workers = min(len(cells), os.cpu_count() or 1)
    if workers < 2:
        return [x for c in cells for x in _check_cell(base_doc, c, change, scenario)]
    global _SHARED
    _SHARED = (base_doc, change, scenario)  # the forked workers inherit it: nothing large is pickled
    try:
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            per_cell = list(pool.map(_check_shared, cells))
    finally:
        _SHARED = None
    return [x for checks in per_cell for x in checks]


_SHARED: tuple | None = None


def _cache_key(base_doc: Document, cells: list[CellSummary], change: Change) -> str:
    """What the checks depend on: the baseline recording, the candidate's measured figures per cell, the
    change, and the code of the analysis and the model (a new version computes afresh)."""
    h = hashlib.sha256(msgspec.json.encode(base_doc))
    h.update(repr([(c.workload, c.value_size, c.rate, {m: c.ops[MEASURED_OP[c.workload]].get(m) for m in METRICS})
                   for c in cells]).encode())
    h.update(repr(change).encode())
    pkg = Path(__file__).resolve().parent.parent
    for p in sorted([*pkg.joinpath("analysis").glob("*.py"), *pkg.joinpath("pipeline").glob("*.py")]):
        h.update(p.read_bytes())
    return h.hexdigest()[:32]


def _cached(key: str) -> list[Check] | None:
    d = environment.cache_dir()
    if d is None:
        return None
    try:
        with open(os.path.join(d, f"whatif-{key}.json")) as f:
            return [Check(**x) for x in json.load(f)]
    except (OSError, ValueError, TypeError):
        return None


def _keep(key: str, checks: list[Check]) -> None:
    """The checks in the cache, written whole (a temporary file renamed) or not at all."""
    d = environment.cache_dir()
    if d is None:
        return
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".whatif-")
    except OSError:
        return  # a cache that cannot be written is no cache
    try:
        with os.fdopen(fd, "w") as f:
            json.dump([c.to_json() for c in checks], f)
        os.replace(tmp, os.path.join(d, f"whatif-{key}.json"))
    except (OSError, TypeError, ValueError):
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _check_shared(cell: CellSummary) -> list[Check]:
    assert _SHARED is not None
    base_doc, change, scenario = _SHARED
    return _check_cell(base_doc, cell, change, scenario)


def _check_cell(base_doc, cell: CellSummary, change: Change, scenario: str) -> list[Check]:
    op = MEASURED_OP[cell.workload]
    try:
        cal = calibrate(base_doc, cell.workload, cell.value_size, cell.rate)
    except CalibrationError:
        return []
    pc = predict_cell(cal, replace(change, rate=cell.rate) if cell.rate else change)
    got = pc.ops.get(op)
    inputs = {"model": "pipeline", "change": change.describe(),
              "calibration": {k: asdict(v) for k, v in pc.inputs.items()},
              "fitted": cal.fitted, "predicted_server": asdict(pc.server),
              "get_clients": pc.ops[GET].clients if GET in pc.ops else None}
    out = []
    for metric in METRICS:
        measured = cell.ops[op].get(metric)
        predicted = getattr(got, metric) if got else None
        if predicted is None:
            continue
        err = None if not measured else round(100.0 * (predicted - measured) / measured, 1)
        tol = TOLERANCE_PCT[metric]
        iv = got.interval.get(metric) if got else None
        verdict = None if measured is None or iv is None else ("inside" if iv[0] <= measured <= iv[1] else "outside")
        out.append(Check(scenario, cell.workload, op, cell.value_size, cell.rate, metric, predicted, measured, err,
                         tol, verdict, inputs, iv, LEVEL, None if err is None else abs(err) <= tol))
    held = pc.memory.get("held_replies_peak")
    if held:  # measured from the candidate's recording by check()
        out.append(Check(scenario, cell.workload, op, cell.value_size, cell.rate, "held_replies_peak", held, None, None,
                         HELD_TOLERANCE_PCT, None, inputs, None, LEVEL))
    return out


GET = "GET"


@dataclass
class PredictedRow:
    """The row a compare table shows beside the candidate's: each metric predicted, and its error."""
    figures: Figures
    errors: dict                  # metric -> error_pct
    intervals: dict = field(default_factory=dict)  # metric -> [lo, hi]


def predicted_ops(checked: list[Check]) -> dict:
    """{(workload, value_size, op, rate): PredictedRow}."""
    out: dict = {}
    for w in checked:
        if w.metric not in METRICS:
            continue  # memory: not a column of the tables
        row = out.setdefault((w.workload, w.value_size, w.op, w.rate), PredictedRow(Figures(), {}))
        setattr(row.figures, w.metric, w.predicted)
        if w.error_pct is not None:
            row.errors[w.metric] = w.error_pct
        if w.interval:
            row.intervals[w.metric] = w.interval
    return out
