"""report --durability REC...: what a power cut loses, one row per side (analysis/powercut.py), as text,
markdown, JSON or HTML."""
from __future__ import annotations

from valkeytrace.analysis.powercut import DurabilityRow
from valkeytrace.reporters.memory_words import fmt_ms
from valkeytrace.reporters.row_table import RowTable

HEAD = ("side", "SET/s offered", "acked writes (keys)", "acked lost at a power cut", "oldest lost write's age",
        "p50 / p99")
DURABILITY_NOTE = ("acked writes: SETs the clients saw acknowledged before the cut (keys: each key's latest, the ones checked); "
        "acked lost: of those keys, the ones whose value (or a later one) the worst power-cut state lacks "
        "(record --verify-durability power-cut: each file cut to what its completed fsyncs had made durable; "
        "a kill's count where the row says kill); oldest lost write's age: at most how long before the cut "
        "the oldest lost acknowledged SET was sent (the cut less its key's floor: that SET, or an older one of the "
        "key still in flight on another connection); p50 / p99: the clients' latency (from each SET's due moment).")


def _n(v: float | int | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def cells(r: DurabilityRow) -> list[str]:
    lost = "–" if r.acked_lost is None else f"{r.acked_lost:,} of {r.acked or 0:,}" + (
        f" (worst of {r.states} states)" if r.states and r.states > 1 else "") + (
        " (a kill)" if r.method == "kill" else "")
    return [r.side + (f" ({r.label})" if r.label and r.label not in r.side else "")
            + (f", the disk stalling {r.stall}" if r.stall else ""),
            _n(r.offered), f"{_n(r.writes_acked)} ({_n(r.acked)})", lost,
            "–" if r.lost_window_ms is None or not r.acked_lost else fmt_ms(r.lost_window_ms * 1000),
            f"{fmt_ms(r.p50_us)} / {fmt_ms(r.p99_us)}"]


def _title(rows: list[DurabilityRow]) -> str:
    sizes = sorted({r.value_size for r in rows})
    return f"Durability at a power cut: open-loop SETs of {', '.join(f'{s} B' for s in sizes)}"


TABLE = RowTable("durability", HEAD, DURABILITY_NOTE, cells, _title, width=160)
RENDER = TABLE.renderers('text', 'markdown', 'json', 'html')
