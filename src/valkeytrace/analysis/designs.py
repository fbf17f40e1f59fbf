"""The designs table (compare --designs, docs/explain.md): one row per design of #3381's thread (always, and the
virtual offload's bio-write, bio-write-block, main-write), from its three recordings: the #4029 shape (GET from
read-heavy, SET from write-only), a write-only open loop under a disk that stalls and blocks writes during its
sync, and a power cut."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from valkeytrace.analysis import offload
from valkeytrace.analysis.report import AnalysedRun
from valkeytrace.analysis.tables import CellSummary


@dataclass
class DesignRow:
    design: str
    value_size: int | None = None
    get_p50_us: float | None = None     # read-heavy (the #4029 shape)
    get_p99_us: float | None = None
    get_tps: float | None = None
    set_p50_us: float | None = None     # write-only
    set_p99_us: float | None = None
    set_tps: float | None = None
    main_aof_writes: int | None = None  # the main thread's AOF write(2)s in the write-only cell
    main_aof_write_ms: float | None = None  # and their time, together
    stall_spec: str | None = None       # the stalling disk's --inject-fsync-delay
    stall_aof_bytes_peak: int | None = None  # the AOF bytes waiting in memory (valkey's buffer + the offload's), peak
    stall_held_bytes_peak: int | None = None  # the replies held, their bytes, peak
    stall_p99_us: float | None = None   # the SETs due during a stall, p99
    stall_main_write_max_us: float | None = None  # the main thread's longest AOF write under the stalls
    postponed_writes: int | None = None  # main-write
    longest_postponement_ms: float | None = None
    handoff_waits: int | None = None    # bio-write-block
    handoff_wait_ms: float | None = None
    acked: int | None = None            # the power cut: acknowledged writes (keys) checked
    acked_lost: int | None = None       # of which lost

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _cell(run: AnalysedRun | None, workload: str) -> CellSummary | None:
    cells = [c for c in (run.cells if run else []) if c.workload == workload]
    return cells[0] if cells else None


def _main(c: CellSummary | None):
    roles = [t for t in (c.server.threads if c and c.server else []) if t.role == "main"]
    return roles[0] if roles else None


def _figures(c: CellSummary | None, op: str):
    o = c.ops.get(op) if c is not None else None
    return o.median if o is not None else None


def _shape(row: DesignRow, run: AnalysedRun) -> None:
    rh, wo = _cell(run, "read-heavy"), _cell(run, "write-only")
    g, s = _figures(rh, MEASURED[0]), _figures(wo, MEASURED[1])
    if rh is not None and g is not None:
        row.get_p50_us, row.get_p99_us, row.get_tps, row.value_size = g.p50_us, g.p99_us, g.tps, rh.value_size
    if wo is not None and s is not None:
        row.set_p50_us, row.set_p99_us, row.set_tps, row.value_size = s.p50_us, s.p99_us, s.tps, wo.value_size
    m = _main(wo)
    if m is not None:
        row.main_aof_writes, row.main_aof_write_ms = m.aof_write.count, m.aof_write.total_ms


def _stall(row: DesignRow, run: AnalysedRun) -> None:
    wo = _cell(run, "write-only")
    if wo is None:
        return
    row.stall_spec = run.doc.emulation.fsync_delay.spec
    mem = run.memory.get(wo.key)
    if mem is not None:
        row.stall_aof_bytes_peak, row.stall_held_bytes_peak = mem.aof_buffer_bytes_peak, mem.held_bytes_peak
    s_ = _figures(wo, MEASURED[1])
    row.stall_p99_us = s_.stall_p99_us if s_ is not None else None
    m = _main(wo)
    row.stall_main_write_max_us = m.aof_write.max_us if m is not None else None
    o = offload.summary(run.doc)
    if o is not None and o.longest_main_write_ms is not None:  # main-write's, timed by the shim: a wait included
        row.stall_main_write_max_us = max(row.stall_main_write_max_us or 0.0, o.longest_main_write_ms * 1000)
    if o is not None:
        row.postponed_writes = int(o.totals.get(POSTPONED, 0))
        row.longest_postponement_ms = o.longest_postponement_ms
        row.handoff_waits, row.handoff_wait_ms = int(o.totals.get(HANDOFF_WAITS, 0)), o.handoff_wait_ms


POSTPONED, HANDOFF_WAITS = "postponed_writes", "handoff_waits"  # the shim's counters (tracers/offload.py)
MEASURED = ("GET", "SET")  # read-heavy's measured op, write-only's


def design_row(design: str, shape: AnalysedRun | None, stall: AnalysedRun | None,
               cut: AnalysedRun | None) -> DesignRow:
    """One design's row from its recordings (any may be missing: its figures stay empty)."""
    row = DesignRow(design)
    if shape is not None:
        _shape(row, shape)
    if stall is not None:
        _stall(row, stall)
    dc = cut.durability_check if cut is not None else None
    if dc is not None and not dc.error:
        row.acked, row.acked_lost = dc.acked, dc.acked_missing
    return row
