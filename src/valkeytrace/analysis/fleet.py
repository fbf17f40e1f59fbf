"""Recordings as one table (`valkeytrace export --table`): a typed row per recording, side, cell and op with
every figure the report's tables show (analysis/tables.py's medians, the server's main-thread budget, what
the server held, the durability check) and the recording's label, versions and settings beside them."""
from __future__ import annotations

import os
import typing
from dataclasses import dataclass, fields

from valkeytrace.analysis import memory
from valkeytrace.analysis.memory import CellMemory
from valkeytrace.analysis.summary import BUDGET, MainThread
from valkeytrace.analysis.tables import CellSummary, OpSummary, summarize
from valkeytrace.recording.model import Document, DurabilityCheck, decode


@dataclass
class TableRow:
    """One op of one cell of one recording. Latencies in µs, rates per second, memory in bytes, shares of the
    main thread's wall time in percent; None where the recording has no such figure."""
    recording: str                   # the file's name
    label: str                       # the recording's label
    side: str | None                 # baseline or candidate (a recording made by valkeytrace compare)
    created: str | None              # when it began
    valkeytrace_version: str | None
    server_version: str | None
    appendfsync: str | None
    io_threads: int | None
    backend: str | None              # the tracer
    fsync_delay_ms: float | None     # the emulated fsync latency added per call
    offload: str | None              # the virtual offload's mode (durable, early-ack)
    offload_gather_ms: float | None  # its gather window
    duration_s: float | None         # each window's length asked for
    repeat: int | None               # repeats asked for each cell
    keyspace: int | None
    workload: str
    value_size: int
    rate: float | None               # open loop: requests due per second (None: closed loop)
    op: str
    role: str                        # measured or background
    clients: int | None
    n: int                           # repeats measured (each figure below is their median)
    tps: float | None
    mb_s: float | None
    p50_us: float | None
    p95_us: float | None
    p99_us: float | None
    mean_us: float | None
    offered_rate: float | None       # open loop
    achieved_rate: float | None
    service_p50_us: float | None
    main_on_cpu_pct: float | None    # the main thread's budget (it sums to 100)
    main_blocked_in_fsync_pct: float | None
    main_blocked_in_aof_write_pct: float | None
    main_waiting_for_cpu_pct: float | None
    main_idle_pct: float | None
    main_other_blocked_pct: float | None
    held_replies_peak: int | None    # what the server held, the peaks over the cell's windows
    held_bytes_peak: int | None
    dirty_keys_peak: int | None
    aof_buffer_bytes_peak: int | None
    rss_peak_bytes: int | None
    rss_start_bytes: int | None
    durability_method: str | None    # --verify-durability: kill or power-cut (the launch's: the same on its every row)
    durability_acked: int | None     # acknowledged keys checked (the launch's)
    durability_missing: int | None   # of which the reloaded AOF (a power cut's worst state) lacked
    durability_error: str | None     # why the check could not run (a loss found in what was read still counts)


COLUMNS = tuple(f.name for f in fields(TableRow))


def column_types() -> dict[str, type]:
    """Each column's type (int, float, str or bool), None allowed in every column but the cell's keys."""
    out = {}
    for name, hint in typing.get_type_hints(TableRow).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        out[name] = args[0]
    return out


def table_rows(path: str, doc: Document | dict) -> list[TableRow]:
    """The recording's rows, cell by cell in the report's order, each cell's ops in the workload's order."""
    d = decode(doc)
    check = memory.durability_check(d.runs)
    head = _recording_columns(path, d)
    out = []
    for c in summarize(d):
        # the runs the report's memory table reads (analysis/report.analyse): the cell's, at every added delay
        raw = [r for r in d.runs if r.workload == c.workload and r.value_size == c.value_size
               and (r.load.rate if r.load else None) == c.rate and r.status == "ok"]
        mem = memory.cell_memory(raw)
        main = c.server.main_thread if c.server else None
        for o in c.ops.values():
            out.append(TableRow(**head, **_op_columns(c, o), **_budget(main), **_memory(mem),
                                **_durability(check)))
    return out


def _recording_columns(path: str, d: Document) -> dict:
    emu, s = d.emulation, d.settings
    off = emu.offload
    delay = emu.fsync_delay.median_ns
    # a row's columns (TableRow's names), not a document's keys
    return dict(recording=os.path.basename(path), label=d.label, side=next((x.side for x in d.launches if x.side), None),
                created=d.created, valkeytrace_version=d.valkeytrace_version, server_version=d.server.version,
                appendfsync=d.server.appendfsync, io_threads=d.server.io_threads, backend=s.backend,
                fsync_delay_ms=None if delay is None else delay / 1e6, offload=off.mode if off else None,
                offload_gather_ms=off.gather_ns / 1e6 if off and off.gather_ns is not None else None,
                duration_s=s.duration_s, repeat=s.repeat, keyspace=s.keyspace)


def _op_columns(c: CellSummary, o: OpSummary) -> dict:
    m = o.median
    return {"workload": c.workload, "value_size": c.value_size, "rate": c.rate, "op": o.op, "role": o.role,
            "clients": o.clients, "n": o.n, "tps": m.tps, "mb_s": m.mb_s, "p50_us": m.p50_us, "p95_us": m.p95_us,
            "p99_us": m.p99_us, "mean_us": m.mean_us, "offered_rate": m.offered_rate,
            "achieved_rate": m.achieved_rate, "service_p50_us": m.service_p50_us}


def _budget(main: MainThread | None) -> dict:
    return {f"main_{cat.name}": getattr(main, cat.name) if main else None for cat in BUDGET}


def _memory(m: CellMemory | None) -> dict:
    kb = (lambda v: None if v is None else int(v) * 1024)  # noqa: E731
    return {"held_replies_peak": m.held_replies_peak if m else None, "held_bytes_peak": m.held_bytes_peak if m else None,
            "dirty_keys_peak": m.dirty_keys_peak if m else None,
            "aof_buffer_bytes_peak": m.aof_buffer_bytes_peak if m else None,
            "rss_peak_bytes": kb(m.server_rss_kb_peak) if m else None,
            "rss_start_bytes": kb(m.server_rss_kb_start) if m else None}


def _durability(check: DurabilityCheck | None) -> dict:
    """The launch's check: its figures, blank when it has an error and found no loss in what could be read."""
    said = check is not None and (not check.error or check.acked_missing > 0)
    return {"durability_method": check.method if check else None,
            "durability_acked": check.acked if check and said else None,
            "durability_missing": check.acked_missing if check and said else None,
            "durability_error": check.error if check else None}
