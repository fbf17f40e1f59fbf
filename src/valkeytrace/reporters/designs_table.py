"""compare --designs: #3381's designs side by side, one row per design (analysis/designs.py), as text, markdown,
JSON or HTML."""
from __future__ import annotations

from valkeytrace.analysis.designs import DesignRow
from valkeytrace.reporters.memory_words import fmt_ms
from valkeytrace.reporters.row_table import RowTable

HEAD = ("design", "GET p50 / p99", "GET/s", "SET p50 / p99", "SET/s", "main thread's AOF writes",
        "stall: AOF bytes in memory, peak", "stall: held replies' bytes, peak", "stall: SET p99 in the stalls",
        "stall: main's longest write", "postponed (longest) / hand-offs waited", "acked lost at a power cut")
DESIGNS_NOTE = ("GET from read-heavy, SET from write-only (the #4029 shape, the common options); main thread's AOF "
                "writes: its write(2)s to the AOF in the write-only cell and their time together; stall: a write-only "
                "open loop on a disk that stalls and blocks writes during its sync (memory: what the server kept, "
                "sampled; SET p99 of the requests due during a stall, from their due moment; main's longest write: the "
                "kernel's timing of its AOF write(2)s, main-write's as the shim times them, a wait for the disk's sync "
                "included); postponed: main-write's "
                "writes kept in memory while a sync ran (its longest postponement); hand-offs waited: bio-write-block's "
                "(their time together); acked lost: of the acknowledged writes checked at a power cut.")


def _n(v: float | int | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def _kb(v: int | None) -> str:
    return "–" if v is None else f"{v / 1024:,.0f} KiB"


def _pair(a: float | None, b: float | None) -> str:
    return f"{fmt_ms(a)} / {fmt_ms(b)}"


def cells(r: DesignRow) -> list[str]:
    writes = "–" if r.main_aof_writes is None else (
        "none" if not r.main_aof_writes else f"{r.main_aof_writes:,} ({r.main_aof_write_ms or 0:,.0f} ms)")
    parts = [f"{r.postponed_writes:,} ({r.longest_postponement_ms or 0:,.0f} ms)" if r.postponed_writes else "",
             f"{r.handoff_waits:,} waited ({r.handoff_wait_ms or 0:,.0f} ms)" if r.handoff_waits else ""]
    lost = "–" if r.acked_lost is None else f"{r.acked_lost:,} of {r.acked or 0:,}"
    return [r.design, _pair(r.get_p50_us, r.get_p99_us), _n(r.get_tps), _pair(r.set_p50_us, r.set_p99_us),
            _n(r.set_tps), writes, _kb(r.stall_aof_bytes_peak), _kb(r.stall_held_bytes_peak), fmt_ms(r.stall_p99_us),
            fmt_ms(r.stall_main_write_max_us), "; ".join(p for p in parts if p) or "–", lost]


def _title(rows: list[DesignRow]) -> str:
    sizes = sorted({r.value_size for r in rows if r.value_size})
    stall = next((r.stall_spec for r in rows if r.stall_spec), None)
    return (f"#3381's designs, {', '.join(f'{s} B' for s in sizes) or 'no cell'}"
            + (f"; stall: --inject-fsync-delay {stall}" if stall else ""))


TABLE = RowTable("designs", HEAD, DESIGNS_NOTE, cells, _title, width=220)
