"""What the server held in memory over a cell's windows (runs[].memory, tracers/memory.py): the peaks
and one window's timeline, for the reports (cells[].memory) and the overload table; and the launch's
durability check (--verify-durability)."""
from __future__ import annotations

from dataclasses import dataclass, field

from valkeytrace.recording.model import DurabilityCheck, MemorySeries, Run

# the timeline a report carries: t_s and these columns of the recording's samples
TIMELINE = ("held_replies", "held_bytes", "dirty_keys", "aof_buffer_bytes", "rss_kb")


@dataclass(frozen=True)
class CellMemory:
    held_replies_peak: int | None      # replies the virtual offload held at once (None: no offload)
    held_bytes_peak: int | None        # their bytes and those held behind them (as the client's buffer holds them)
    dirty_keys_peak: int | None        # keys written and not yet durable
    aof_buffer_bytes_peak: int | None  # valkey's AOF buffer (+ the offload's queue); None: INFO never answered
    server_rss_kb_peak: int | None     # the server's resident set
    used_memory_peak: int | None       # INFO used_memory
    clients_normal_peak: int | None    # INFO mem_clients_normal (the clients' buffers as valkey counts them)
    server_rss_kb_start: int | None    # the resident set at the first window's start
    aof_delayed_fsync: int | None      # everysec: writes valkey postponed while its fsync was in progress
    windows: int
    hz: int | None
    behind_replies_peak: int | None = None  # replies (a rejected write's error) held only behind those, in order
    stalls: list | None = None       # the injected stalls of the timeline's window: [start, end] s
    timeline: list = field(default_factory=list)  # [t_s, *TIMELINE] of the window with the largest held peak

    def to_json(self) -> dict:
        return {"held_replies_peak": self.held_replies_peak, "held_bytes_peak": self.held_bytes_peak,
                "dirty_keys_peak": self.dirty_keys_peak, "aof_buffer_bytes_peak": self.aof_buffer_bytes_peak,
                "server_rss_kb_peak": self.server_rss_kb_peak, "used_memory_peak": self.used_memory_peak,
                "clients_normal_peak": self.clients_normal_peak, "server_rss_kb_start": self.server_rss_kb_start,
                "aof_delayed_fsync": self.aof_delayed_fsync, "windows": self.windows, "hz": self.hz,
                "behind_replies_peak": self.behind_replies_peak, "stalls": self.stalls,
                "timeline_columns": ["t_s", *TIMELINE], "timeline": self.timeline}


def _column(m: MemorySeries, name: str) -> list:
    if name not in m.columns:
        return []
    i = m.columns.index(name)
    return [row[i] for row in m.samples if i < len(row) and row[i] is not None]


def _peak(series: list[MemorySeries], name: str) -> int | None:
    vals = [v for m in series for v in _column(m, name)]
    return int(max(vals)) if vals else None


def cell_memory(runs: list[Run]) -> CellMemory | None:
    """The cell's memory over its measured windows, or None when none was sampled."""
    series = [r.memory for r in runs if r.memory is not None and r.memory.samples]
    if not series:
        return None
    top = max(series, key=lambda m: max(_column(m, "held_replies") or [0]))
    idx = [top.columns.index(c) if c in top.columns else None for c in ("t_s", *TIMELINE)]
    timeline = [[row[i] if i is not None and i < len(row) else None for i in idx] for row in top.samples]
    rss0 = _column(series[0], "rss_kb")
    delayed = [m.aof_delayed_fsync for m in series if m.aof_delayed_fsync is not None]
    return CellMemory(_peak(series, "held_replies"), _peak(series, "held_bytes"), _peak(series, "dirty_keys"),
                      _peak(series, "aof_buffer_bytes"), _peak(series, "rss_kb"), _peak(series, "used_memory"),
                      _peak(series, "clients_normal_bytes"), int(rss0[0]) if rss0 else None,
                      sum(delayed) if delayed else None, len(series), top.hz, _peak(series, "behind_replies"),
                      top.stalls, timeline)


def durability_check(runs: list[Run]) -> DurabilityCheck | None:
    """The launch's --verify-durability result (on its last run), or None."""
    return next((r.durability_check for r in reversed(runs) if r.durability_check is not None), None)
