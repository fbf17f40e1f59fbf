"""The review's question on #3381 ("differences to the appendonly≠always case"), answered from recordings
of one open-loop SET rate (record --verify-durability power-cut): one row per side (always, everysec, the
durable offload, with or without a stalling disk): the writes acknowledged, those a power cut loses, how far
back the oldest lost one reaches, and the latency the clients saw for it (report --durability)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from valkeytrace.analysis import memory, overload
from valkeytrace.analysis.tables import CellSummary
from valkeytrace.recording.model import Document


@dataclass(frozen=True)
class DurabilityRow:
    label: str
    side: str                  # fsync always, fsync everysec, offload durable, ...
    value_size: int
    stall: str | None          # the injected stall, as asked
    offered: float | None      # SETs due a second
    method: str | None         # kill or power-cut
    acked: int | None          # keys whose latest acknowledged SET was checked
    writes_acked: int | None   # acknowledged SETs in all
    acked_lost: int | None     # of the keys: lost (the worst state's)
    states: int | None         # the power-cut states loaded
    lost_window_ms: float | None  # an upper bound on the oldest lost write's age at the cut (its key's floor's send)
    p50_us: float | None
    p99_us: float | None

    def to_json(self) -> dict:
        return asdict(self)


def rows(doc: Document, cells: list[CellSummary]) -> list[DurabilityRow]:
    """One row per open-loop SET cell of this recording (analysis/overload.py's), with its launch's check (the
    figures are the launch's, the same on each of its rows). A check with an error claims nothing, but a loss it
    found in what could be read is still a loss (as the sentence and the session say): its figures then stand."""
    check = memory.durability_check(doc.runs)
    c = check if check is not None and (not check.error or check.acked_missing > 0) else None
    return [DurabilityRow(r.label, r.side, r.value_size, r.stall, r.offered, c.method if c else None,
                          c.acked if c else None, c.writes_acked if c else None, c.acked_missing if c else None,
                          len(c.states) if c and c.states else None, c.lost_window_ms if c else None, r.p50_us, r.p99_us)
            for r in overload.rows(doc, cells)]
