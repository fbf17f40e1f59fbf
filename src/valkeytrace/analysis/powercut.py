"""The review's question on #3381 ("differences to the appendonly≠always case"), answered from recordings
of one open-loop SET rate (record --verify-durability power-cut): one row per side (always, everysec, the
durable offload, with or without a stalling disk): the writes acknowledged, those a power cut loses, how far
back the oldest lost one reaches, and the latency the clients saw for it (report --durability)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from valkeytrace.analysis import memory
from valkeytrace.analysis.overload import side_of, stall_of
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
    lost_window_ms: float | None  # the oldest lost write's age at the cut
    p50_us: float | None
    p99_us: float | None

    def to_json(self) -> dict:
        return asdict(self)


def rows(doc: Document, cells: list[CellSummary]) -> list[DurabilityRow]:
    """One row per open-loop SET cell of this recording, with its launch's durability check."""
    check = memory.durability_check(doc.runs)
    ok = check is not None and not check.error
    out = []
    for c in cells:
        o = c.ops.get("SET")
        if o is None or not o.median.offered_rate:
            continue
        f = o.median
        out.append(DurabilityRow(
            doc.label, side_of(doc), c.value_size, stall_of(doc), f.offered_rate,
            check.method if check is not None and ok else None,
            check.acked if check is not None and ok else None,
            check.writes_acked if check is not None and ok else None,
            check.acked_missing if check is not None and ok else None,
            len(check.states) if check is not None and ok and check.states else None,
            check.lost_window_ms if check is not None and ok else None, f.p50_us, f.p99_us))
    return out
