"""report --overload REC...: the overload table (analysis/overload.py), one row per side, as text,
markdown or JSON."""
from __future__ import annotations

from valkeytrace.analysis.overload import OverloadRow
from valkeytrace.reporters.memory_words import fmt_bytes, fmt_ms
from valkeytrace.reporters.row_table import RowTable

HEAD = ("side", "SET/s offered → achieved", "p50 / p99", "due in a stall p50 / p99", "outside p50 / p99",
        "held replies (+ behind)", "held bytes", "dirty keys", "AOF buffer", "RSS growth", "rejected", "closed",
        "acked lost")
OVERLOAD_NOTE = ("held replies wait for their AOF bytes to be durable (the virtual offload's count, as #3381 keeps them in "
        "the client's output buffer); behind: replies (a rejected write's error) that wait only behind them, "
        "replies leaving in order; AOF buffer: valkey's aof_buffer_length plus the offload's queue; RSS growth: "
        "the server's resident set at its peak over its first sample; acked lost: --verify-durability's count.")


def _n(v: float | int | None, unit: str = "") -> str:
    return "–" if v is None else f"{v:,.0f}{unit}"


def cells(r: OverloadRow) -> list[str]:
    return [r.side + (f" ({r.label})" if r.label and r.label not in r.side else ""),
            f"{_n(r.offered)} → {_n(r.achieved)}", f"{fmt_ms(r.p50_us)} / {fmt_ms(r.p99_us)}",
            f"{fmt_ms(r.stall_p50_us)} / {fmt_ms(r.stall_p99_us)}", f"{fmt_ms(r.outside_p50_us)} / {fmt_ms(r.outside_p99_us)}",
            _n(r.held_replies_peak) + (f" (+{r.behind_replies_peak:,})" if r.behind_replies_peak else ""),
            fmt_bytes(r.held_bytes_peak), _n(r.dirty_keys_peak), fmt_bytes(r.aof_buffer_bytes_peak),
            fmt_bytes(r.rss_kb_growth * 1024 if r.rss_kb_growth is not None else None), _n(r.rejected), _n(r.closed),
            "–" if r.acked_lost is None else f"{r.acked_lost:,} of {r.acked or 0:,}"]


def _title(rows: list[OverloadRow]) -> str:
    stalls = sorted({r.stall for r in rows if r.stall})
    sizes = sorted({r.value_size for r in rows})
    return (f"Overload: open-loop SETs of {', '.join(f'{s} B' for s in sizes)}"
            + (f", the disk stalling {', '.join(stalls)}" if stalls else ""))


TABLE = RowTable("overload", HEAD, OVERLOAD_NOTE, cells, _title, width=200)
RENDER = TABLE.renderers('text', 'markdown', 'json')
