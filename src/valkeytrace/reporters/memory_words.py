"""The words for what a cell's server held in memory (analysis/memory.py) and for an open-loop op under
injected stalls, shared by every report format; and the durability check's sentence."""
from __future__ import annotations

from dataclasses import dataclass

from valkeytrace.analysis.memory import CellMemory
from valkeytrace.workloads import Workload

# a memory table's columns after the side and the value size: (heading, CellMemory's field)
MEMORY_COLUMNS = (("Held replies", "held_replies_peak"), ("Held bytes", "held_bytes_peak"),
                  ("Dirty keys", "dirty_keys_peak"), ("AOF buffer", "aof_buffer_bytes_peak"),
                  ("RSS peak", "server_rss_kb_peak"), ("RSS from", "server_rss_kb_start"))


def fmt_bytes(v: int | None) -> str:
    if v is None:
        return "–"
    return f"{v / 1e6:,.1f} MB" if v >= 1e6 else f"{v / 1e3:,.1f} kB" if v >= 1e3 else f"{v} B"


def fmt_ms(us: float | None) -> str:
    return "–" if us is None else f"{us / 1000:,.1f} ms" if us < 1e6 else f"{us / 1e6:,.2f} s"


def stall_note(o) -> str:
    """An open-loop op under injected stalls: its latency for requests due during one and outside; and the
    writes a server refused (--offload-overflow reject)."""
    m = o.median
    parts = []
    if m.stall_p50_us is not None or m.outside_p50_us is not None:
        parts.append(f"due during a stall p50 {fmt_ms(m.stall_p50_us)} / p99 {fmt_ms(m.stall_p99_us)}, outside p50 "
                     f"{fmt_ms(m.outside_p50_us)} / p99 {fmt_ms(m.outside_p99_us)}")
    if m.rejected:
        parts.append(f"{m.rejected:,.0f} rejected")
    return "; ".join(parts)


def durability_sentence(label: str, check) -> str | None:
    """--verify-durability's result in one sentence (a loss first in every report), or None."""
    if check is None:
        return None
    cut = check.method == "power-cut"
    where = (f"the worst of {len(check.states)} power-cut state{'s' if len(check.states) != 1 else ''} (each file cut "
             "to what its syncs had made durable)" if cut else "the AOF after the server was killed")
    if check.acked_missing:  # a loss found is said even when part of the check could not run
        ex = check.examples[0] if check.examples else {}
        back = f", reaching {check.lost_window_ms:,.0f} ms back from the cut" if cut and check.lost_window_ms else ""
        return (f"{label}: {check.acked_missing:,} of {check.acked:,} acknowledged writes missing from {where}{back}"
                + (f" (e.g. {ex.get('key')}: {ex.get('reloaded') or 'absent'})" if ex else "")
                + (f"; and {check.error}" if check.error else ""))
    if check.error:
        return f"{label}: the durability check could not run: {check.error}"
    runs = f", the writes of {len(check.runs)} run{'s' if len(check.runs) != 1 else ''}" if check.runs else ""
    caveat = "" if cut else (" (SIGKILL: what the kernel had written survives a process crash; a power loss is not "
                             "tested: --verify-durability power-cut)")
    return f"{label}: none of {check.acked:,} acknowledged keys{runs} missing from {where}{caveat}"


@dataclass
class MemoryTable:
    """What the server held over a workload's cells, each side's peaks over its windows: rows [side, value size,
    *columns], a column only where some side has its figure; notes under it."""
    title: str
    columns: tuple
    rows: list
    notes: list


def _memory_cell(m: CellMemory, name: str) -> str:
    v = getattr(m, name)
    if v is None:
        return "–"
    if name == "held_replies_peak":
        return f"{v:,}" + (f" (+{m.behind_replies_peak:,})" if m.behind_replies_peak else "")
    if name == "dirty_keys_peak":
        return f"{v:,}"
    return fmt_bytes(v * 1024 if name.startswith("server_rss_kb") else v)


def memory_table(w: Workload, sides: list) -> MemoryTable | None:
    """The table of workload w over sides [(name, analysis.report.AnalysedRun)], value size by value size,
    the sides in order within each; None when no side sampled the memory of a cell of w."""
    keys = list(dict.fromkeys(c.key for _, run in sides for c in run.cells if c.workload == w.name))
    rows, notes = [], []
    for key in keys:
        size = f"{key[1]} B" + (f" @ {key[2]:,.0f}/s" if key[2] else "")
        for name, run in sides:
            m = run.memory.get(key)
            if m is None:
                continue
            rows.append([name, size, *[_memory_cell(m, f) for _, f in MEMORY_COLUMNS]])
            if m.aof_delayed_fsync:
                notes.append(f"{name} {size}: {m.aof_delayed_fsync:,} AOF write(s) past valkey's 2 s wait "
                             "(aof_delayed_fsync)")
            if m.behind_replies_peak:
                notes.append("held replies (+N): replies held only behind them, in order (a rejected write's error)")
    if not rows:
        return None
    keep = [i for i in range(len(MEMORY_COLUMNS)) if any(r[2 + i] != "–" for r in rows)]
    return MemoryTable(w.title or w.name, ("Value", *[MEMORY_COLUMNS[i][0] for i in keep]),
                       [r[:2] + [r[2 + i] for i in keep] for r in rows], list(dict.fromkeys(notes)))
