"""Text: the verdict first (one line per measured op and size, then the cause), one short "why"
per distinct finding, the #4029 tables, each caveat once with its cells; per-thread tables, the
full accounting and the model's sections behind --detail. The terminal's width is respected
(COLUMNS, else the terminal, else 100)."""
from __future__ import annotations

import os
import shutil

from rich.console import Console
from rich.markup import escape
from rich.cells import cell_len
from rich.table import Table

from valkeytrace.analysis import verdict as vd
from valkeytrace.analysis.report import ReportInput
from valkeytrace.reporters.sections import caveats_by_cell, finding_title, model_sections
from valkeytrace.analysis.tables import METRICS
from valkeytrace.reporters.memory_words import MemoryTable, durability_sentence
from valkeytrace.reporters.sentences import exit_sentence, overhead_line, share_tag, warning_texts
from valkeytrace.reporters.base import (ReplicationTable, ServerTable, client_note, replication_tables, rule_line, server_note,
                                       server_table, verdict_lines)
from valkeytrace.reporters.clients import ClientTable, client_tables, failover_line, open_note, side_names
from valkeytrace.reporters.claims import claim, gap_text, say

HEAD = {"tps": "TPS (K/s)", "mb_s": "MB/s", "p50_us": "P50 µs", "p95_us": "P95 µs", "p99_us": "P99 µs"}


def width() -> int:
    cols = os.environ.get("COLUMNS")
    if cols and cols.isdigit() and int(cols) > 20:
        return int(cols)
    return shutil.get_terminal_size((100, 24)).columns


def _val(metric, v):
    if v is None:
        return "n/a"
    if metric == "tps":
        return f"{v / 1000:.2f}"
    if metric == "mb_s":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def render(inp: ReportInput, out) -> None:
    console = Console(file=out, width=width(), force_terminal=False, soft_wrap=False,
                      color_system=None if not out.isatty() else "auto")
    _header(console, inp)
    if inp.comparison is None:
        _single(console, inp)
    else:
        _verdict(console, inp)
        _why(console, inp)
        _tables(console, inp)
        _caveats(console, inp)
    _warnings(console, inp)
    if inp.detail or inp.comparison is None:  # one recording: its threads are the story, shown whole
        _detail(console, inp)
    else:
        console.print("[dim]--detail adds the per-thread tables, the full accounting of each change, the "
                      "intervention and the what-if.[/dim]")


def _header(console, inp: ReportInput) -> None:
    for run in inp.runs:  # before anything: a server that ended under the recording
        for e in run.server_exits:
            console.print(f"[bold red]{escape(exit_sentence(run.label, e))}[/bold red]")
        lost = durability_sentence(run.label, run.durability_check)
        if lost:
            console.print(f"[bold red]{escape(lost)}[/bold red]" if run.durability_check.acked_missing else escape(lost))
    names = [run.label for run in inp.runs]
    if inp.comparison is not None:
        sides = side_names(inp.runs)
        names = list(sides.names)
        console.print(f"[bold]{escape(names[1])} vs {escape(names[0])}[/bold] "
                      "(candidate vs baseline; each figure the median of its repeats)")
        if sides.legend:
            console.print("  " + escape(sides.legend))
    about = [f"server {run.server.version} ({server_note(run)}); client {client_note(run)}"
             + ("" if run.complete else "  [red](incomplete)[/red]") for run in inp.runs]
    if len(about) > 1 and len(set(about)) == 1:  # one line for what both sides share
        console.print(f"  both: {about[0]}")
    else:
        for name, line in zip(names, about):
            console.print(f"  {escape(name)}: {line}")
    banners = list(dict.fromkeys(run.emulation for run in inp.runs if run.emulation))
    for b in banners:
        who = [name for name, run in zip(names, inp.runs) if run.emulation == b]
        console.print(f"  [bold red]{escape(b[0].upper() + b[1:])}[/bold red]"
                      + (f" ({', '.join(who)})" if len(inp.runs) > 1 and len(who) < len(inp.runs) else ""))


def _verdict(console, inp: ReportInput) -> None:
    _rule(console, "[bold]Verdict[/bold]")
    if rule_line(inp):
        console.print(f"[dim]{escape(rule_line(inp))}[/dim]")
    for head, why in verdict_lines(inp):
        console.print(f"[bold]{escape(head[0])}[/bold]: " + escape(head[1]))
        if why:
            console.print("    " + escape(why))


def _why(console, inp: ReportInput) -> None:
    fs = vd.findings(inp.verdict or [], inp.explanation or [])
    if not fs:
        return
    _rule(console, "[bold]Why[/bold]")
    for f in fs:
        console.print(f"[bold]{escape(finding_title(f.kind))}[/bold] ({', '.join(f.cells)})")
        for s in f.sides:
            console.print("  " + escape(say(s)))


def _rule(console, title: str) -> None:
    """A section heading: a rule where the title fits, else the title alone, wrapped (never cut)."""
    from rich.text import Text

    if Text.from_markup(title).cell_len + 6 <= console.width:
        console.rule(title)
    else:
        console.print(title)


def _tables(console, inp: ReportInput) -> None:
    for t in client_tables(inp, short=True):
        table, keep = _client_table(t, console.width)
        dropped = [c for c in t.columns if c != "Notes" and c not in [t.columns[k] for k in keep]]
        notes = []
        for cells, kind in t.rows:
            if cells[-1]:
                note = cells[-1]
                for c in dropped:  # a note names only columns the table shows
                    note = note.replace(f"{c}, ", "").replace(f", {c}", "")
                notes.append(f"{cells[1]}: {note}" if kind == "delta" else note)
        console.print(table)
        if notes:
            console.print("  [dim]" + escape("; ".join(dict.fromkeys(notes))) + "[/dim]")
        if t.seed:
            console.print("  " + escape(t.seed))
        if t.memory:
            _memory(console, t.memory)
    console.print("[dim]Delta: candidate vs baseline; TPS positive = better, latencies negative = better.[/dim]")
    if inp.comparison and inp.comparison.missing:
        console.print("[yellow]not compared:[/yellow] " + "; ".join(inp.comparison.missing))


def _client_table(t: ClientTable, width: int) -> tuple[Table, list]:
    """The table as it fits width, the title heading its first column as in the seed: the model's row with each
    figure's range beside it, else below it ([lo, hi] on the next line); MB/s (TPS x value size) gives way
    before the ranges leave their figures. (The table, the columns of t it shows.)"""
    cols = [i for i, c in enumerate(t.columns) if c != "Notes"]
    choices = [(False, cols), (False, [i for i in cols if t.columns[i] != "MB/s"]),
               (True, cols), (True, [i for i in cols if t.columns[i] != "MB/s"])]
    for split, keep in choices:
        rows = [[cells[0], *[_split(cells[1 + k]) if split and kind == "predicted" else cells[1 + k] for k in keep]]
                for cells, kind in t.rows]
        widths = fit_widths([t.title, *[t.columns[k] for k in keep]], rows, width)
        if widths is not None:
            break
    table = Table(show_edge=False, pad_edge=False)
    for i, col in enumerate((t.title, *[t.columns[k] for k in keep])):  # narrow: wrap, never cut
        table.add_column(col, justify="left" if i < 3 else "right", overflow="fold", width=widths[i] if widths else None)
    for cells, (_, kind) in zip(rows, t.rows):
        table.add_row(*(escape(c) for c in cells), end_section=kind == "delta")
    return table, keep


def _split(cell: str) -> str:
    return cell.replace(" [", "\n[", 1)


def fit_widths(head: list, rows: list, width: int) -> list | None:
    """Each column's width for a table of rich's (no edges) that fits width: its widest cell and its whole
    heading where all fit, else as many headings whole as the room allows (the least room first), the others
    on two lines; None when even that does not fit."""
    def longest(text: str) -> int:
        return max((cell_len(line) for line in text.split("\n")), default=0)

    def two_lines(h: str) -> int:  # the narrowest a heading gets on two lines, broken at a space
        w = h.split(" ")
        return min([cell_len(h)] + [max(cell_len(" ".join(w[:k])), cell_len(" ".join(w[k:]))) for k in range(1, len(w))])

    cells = [max([longest(r[i]) for r in rows], default=0) for i in range(len(head))]
    full = [max(c, longest(h)) for c, h in zip(cells, head)]
    least = [max(c, two_lines(h)) for c, h in zip(cells, head)]
    room = width - 3 * (len(head) - 1) - sum(least)
    if room < 0:
        return None
    out = list(least)
    for i in sorted(range(len(head)), key=lambda i: full[i] - least[i]):  # whole headings, the shortest wraps first
        if full[i] - least[i] <= room:
            out[i], room = full[i], room - (full[i] - least[i])
    return out


def _memory(console, m: MemoryTable) -> None:
    """What the server held, side by value size (the short line above it: said once per table, not wrapped)."""
    console.print("[dim]Memory, peaks over each cell's windows:[/dim]")
    widths = fit_widths([m.title, *m.columns], m.rows, console.width)
    table = Table(show_edge=False, pad_edge=False)
    for i, col in enumerate((m.title, *m.columns)):
        table.add_column(col, justify="left" if i < 2 else "right", overflow="fold", width=widths[i] if widths else None)
    for cells in m.rows:
        table.add_row(*(escape(c) for c in cells))
    console.print(table)
    for n in m.notes:
        console.print("  [dim]" + escape(n) + "[/dim]")


def _caveats(console, inp: ReportInput) -> None:
    items = caveats_by_cell(inp.explanation or [])
    if not items:
        return
    _rule(console, "[bold]Caveats[/bold]")
    for text, cells in items:
        console.print(f"- {escape(text)} [dim]({', '.join(cells)})[/dim]")


def _warnings(console, inp: ReportInput) -> None:
    for run in inp.runs:
        for w in warning_texts(run.warnings):
            console.print(f"[yellow]warning ({escape(run.label)}):[/yellow] {escape(w)}")
        for r in run.problems:
            console.print(f"[red]{escape(run.label)}: {r.workload} {r.value_size} B #{r.repeat} "
                          f"{r.status}:[/red] {escape(str(r.error))}")


def _single(console, inp: ReportInput) -> None:
    run = inp.baseline
    if overhead_line(run):
        console.print(f"{run.label}: {overhead_line(run)}")
    t = Table(title="median of repeats (min–max below)", show_edge=False, pad_edge=False)
    for col in ("Workload", "Value", "Op", "Role", "n", *HEAD.values()):
        t.add_column(col, justify="right" if col not in ("Workload", "Op", "Role") else "left", overflow="fold")
    notes = []
    for cell in run.cells:
        for op, o in cell.ops.items():
            size = f"{cell.value_size} B" + (f" @ {cell.rate:,.0f}/s" if cell.rate else "")
            who = f"{o.role} open" if o.median.offered_rate else f"{o.role} c={o.clients}"
            shards = [s for s in cell.shards if op in s.ops]
            t.add_row(cell.workload, size, op, who, str(o.n), *[_cell(o, m) for m in METRICS], end_section=not shards)
            for i, s in enumerate(shards):  # record --cluster: each shard's own clients under the system's row
                t.add_row("", "", "", f"  shard {s.shard}", str(s.ops[op].n), *[_cell(s.ops[op], m) for m in METRICS],
                          end_section=i == len(shards) - 1)
            if shards:
                notes.append(_shards_note(cell, op, size))
            if o.median.offered_rate:
                notes.append(f"{cell.workload} {size} {op}: {open_note(o)}")
    console.print(t)
    if run.failover is not None:
        notes.append(failover_line(run.failover))
    for n in notes:
        console.print("  " + escape(n))
    for ct in client_tables(inp, short=True):
        if ct.memory:
            _memory(console, ct.memory)
    entries = run.explanation or []
    if entries:
        _rule(console, "[bold]Why[/bold]")
        for e in entries:
            tag = share_tag(e, False)
            console.print(f"[bold]{e.workload} {e.value_size} B {e.op} p50[/bold]"
                          + (f" [cyan]({tag})[/cyan]" if tag else ""))
            console.print("  " + escape(claim(e)))


def _shards_note(cell, op: str, size: str) -> str:
    """The slowest shard of a cell, and the nodes.conf fsyncs counted apart."""
    from valkeytrace.analysis.cluster import slowest

    worst = slowest(cell.shards, op)
    out = f"{cell.workload} {size} {op}: {len(cell.shards)} shards, each its own clients' figures"
    if worst is not None and len(cell.shards) > 1:
        out += f"; the slowest shard {worst.shard} (port {worst.port}), p50 {worst.ops[op].median.p50_us:,.0f} µs"
    c = cell.config_fsync
    if c is not None and c.count:
        out += (f"; nodes.conf fsyncs on the nodes' main threads (apart from the AOF's): {c.count} on {len(c.nodes)} "
                f"node(s), {c.total_ms:,.1f} ms in all, the longest {c.max_ms:,.1f} ms")
    return out


def _cell(o, metric) -> str:
    med, spread = o.median.get(metric), o.spread.get(metric)
    s = _val(metric, med)
    if spread and o.n > 1:
        s += f"\n[dim]{_val(metric, spread[0])}–{_val(metric, spread[1])}[/dim]"
    return s


def _detail(console, inp: ReportInput) -> None:
    _rule(console, "[bold]Detail[/bold]")
    for run in inp.runs:
        if overhead_line(run) and inp.comparison is not None:
            console.print(f"{run.label}: {overhead_line(run)}")
        for cell in run.cells:
            if cell.server:
                server_tables(console, run.label, cell, run.tracer_cost.get(cell.key))
            gap = run.server_views.get((cell.workload, cell.value_size)) if run.server_views else None
            if gap:
                console.print(f"[dim]server's view ({run.label}, {cell.workload} {cell.value_size} B):[/dim] "
                              + escape(gap_text(gap)))
    for rt in replication_tables(inp):
        _plain_table(console, rt)
    if inp.comparison is not None and inp.explanation:
        _rule(console, "[bold]The accounting of each change[/bold]")
        for e in inp.explanation:
            head = f"[bold]{e.workload} {e.value_size} B {e.op} {e.metric.replace('_us', '')}[/bold]"
            tag = share_tag(e, True)
            console.print(head + (f" [cyan]({tag})[/cyan]" if tag else ""))
            console.print("  " + escape(claim(e)))
    for title, lines in model_sections(inp):
        _rule(console, f"[bold]{escape(title)}[/bold]")
        for line in lines:
            console.print("  " + escape(line))


def _plain_table(console, st: ServerTable | ReplicationTable) -> None:
    t = Table(title=st.title, show_edge=False, pad_edge=False)
    for i, col in enumerate(st.columns):
        t.add_column(col, justify="left" if i == 0 else "right", overflow="fold")
    for cells, last in st.rows:
        t.add_row(*(escape(c) for c in cells), end_section=last)
    console.print(t)
    for text, warn in st.notes:
        console.print(f"[yellow]{escape(text)}[/yellow]" if warn else escape(text))


def server_tables(console, label: str, cell, cost=None) -> None:
    """Per cell: thread role | call | count | p50 | p99 | max | total ms | % of wall; the main-thread
    budget and what its figures are (reporters.base.server_table)."""
    st = server_table(label, cell, cost)
    t = Table(title=st.title, caption=st.caption, show_edge=False, pad_edge=False)
    for col in ("Thread role", *st.columns):
        t.add_column(col, justify="left" if col in ("Thread role", "Call") else "right", overflow="fold")
    for cells, last in st.rows:
        t.add_row(*cells, end_section=last)
    console.print(t)
    for text, warn in st.notes:
        console.print(f"[yellow]{escape(text)}[/yellow]" if warn else escape(text))
