"""The answer to #3381's review (2026-05-25), from recordings of one overload (an open-loop SET rate a
stalling disk cannot keep up with): one row per side (fsync always, everysec, the durable offload with no
bound, with pause, with reject): what the clients got, during the stalls and outside them, and what the
server held in memory meanwhile (report --overload)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from valkeytrace.analysis import memory
from valkeytrace.analysis.offload import Counters
from valkeytrace.analysis.tables import CellSummary
from valkeytrace.recording.model import Document


@dataclass(frozen=True)
class OverloadRow:
    label: str
    side: str                       # always, everysec, offload, offload + pause N, offload + reject N
    workload: str
    value_size: int
    stall: str | None               # the injected stall, as asked ("1s every 2.5s")
    offered: float | None           # SETs due a second
    achieved: float | None          # answered a second
    p50_us: float | None
    p99_us: float | None
    stall_p50_us: float | None      # of the SETs due during a stall
    stall_p99_us: float | None
    outside_p50_us: float | None    # of those due outside every stall
    outside_p99_us: float | None
    held_replies_peak: int | None
    behind_replies_peak: int | None
    held_bytes_peak: int | None
    dirty_keys_peak: int | None
    aof_buffer_bytes_peak: int | None
    rss_kb_peak: int | None
    rss_kb_growth: int | None       # the peak over the first sample
    aof_delayed_fsync: int | None   # everysec: the writes valkey postponed (its "fsync is taking too long")
    rejected: float | None
    closed: int | None              # clients closed over their client-output-buffer-limit
    acked: int | None               # --verify-durability: acknowledged keys checked
    acked_lost: int | None

    def to_json(self) -> dict:
        return asdict(self)


def side_of(doc: Document) -> str:
    off = doc.emulation.offload
    if off is not None and off.mode:
        return f"offload {off.mode}" + (f" + {off.overflow} over {off.max_pending:,}" if off.max_pending else "")
    s = doc.server
    return f"fsync {s.appendfsync or '?'}" + (" (bio offload)" if s.bio_aof_offload else "")


def _stall(doc: Document) -> str | None:
    d = doc.emulation.fsync_delay
    if not d.stall_ns:
        return None
    return f"{d.stall_ns / 1e9:g} s every {(d.stall_period_ns or 0) / 1e9:g} s"


def rows(doc: Document, cells: list[CellSummary]) -> list[OverloadRow]:
    """One row per open-loop cell with a measured SET of this recording."""
    out = []
    check = memory.durability_check(doc.runs)
    for c in cells:
        o = c.ops.get("SET")
        if o is None or not o.median.offered_rate:
            continue
        raw = [r for r in doc.runs if r.workload == c.workload and r.value_size == c.value_size and r.status == "ok"]
        m = memory.cell_memory(raw)
        f = o.median
        growth = m.server_rss_kb_peak - m.server_rss_kb_start if m and m.server_rss_kb_peak and m.server_rss_kb_start \
            else None
        out.append(OverloadRow(
            doc.label, side_of(doc), c.workload, c.value_size, _stall(doc), f.offered_rate, f.achieved_rate,
            f.p50_us, f.p99_us, f.stall_p50_us, f.stall_p99_us, f.outside_p50_us, f.outside_p99_us,
            m.held_replies_peak if m else None, m.behind_replies_peak if m else None,
            m.held_bytes_peak if m else None, m.dirty_keys_peak if m else None,
            m.aof_buffer_bytes_peak if m else None, m.server_rss_kb_peak if m else None, growth,
            m.aof_delayed_fsync if m else None, f.rejected,
            Counters.of(raw).obuf_closed if doc.emulation.offload else None,
            check.acked if check and not check.error else None,
            check.acked_missing if check and not check.error else None))
    return out
