"""Text: rich tables with n and spread (min-max) behind each median; noisy deltas marked."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from valkeytrace.analysis.tables import METRICS
from valkeytrace.analysis.report import ReportInput, model_sections, overhead_line, share_tag
from valkeytrace.reporters.base import client_note, fmt_pct, server_note, server_table

HEAD = {"tps": "TPS (K/s)", "mb_s": "MB/s", "p50_us": "P50 µs", "p95_us": "P95 µs", "p99_us": "P99 µs"}


def _val(metric, v):
    if v is None:
        return "n/a"
    if metric == "tps":
        return f"{v / 1000:.2f}"
    if metric == "mb_s":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def _cell(o, metric) -> str:
    med, spread = o.median.get(metric), o.spread.get(metric)
    s = _val(metric, med)
    if spread and o.n > 1:
        s += f"\n[dim]{_val(metric, spread[0])}–{_val(metric, spread[1])}[/dim]"
    return s


def render(inp: ReportInput, out) -> None:
    console = Console(file=out, width=140, force_terminal=False, color_system=None if not out.isatty() else "auto")
    for run in inp.runs:
        c = run.client
        console.print(f"[bold]{run.label}[/bold]: server {run.server.get('version')} ({server_note(run)}), "
                      f"client {client_note(run)}, recording {run.path}"
                      + ("" if run.complete else "  [red](incomplete)[/red]"))
        if overhead_line(run):
            console.print(f"{run.label}: {overhead_line(run)}")
        if run.emulation:
            console.print(f"[bold red]{run.label}: {run.emulation.upper()[:1]}{run.emulation[1:]} "
                          "(emulated slow disk, not a measured one)[/bold red]")
    if inp.comparison is None:
        run = inp.baseline
        t = Table(title="median of repeats (min–max below)")
        for col in ("Workload", "Value", "Op", "Role", "n", *HEAD.values()):
            t.add_column(col, justify="right" if col not in ("Workload", "Op", "Role") else "left")
        for cell in run.cells:
            for op, o in cell.ops.items():
                t.add_row(cell.workload, f"{cell.value_size} B", op, f"{o.role} c={o.clients}", str(o.n),
                          *[_cell(o, m) for m in METRICS], end_section=True)
        console.print(t)
    else:
        cmp = inp.comparison
        t = Table(title=f"{inp.candidate.label} vs {inp.baseline.label}: median of repeats; "
                        "~ = within noise (ranges overlap or n<2)")
        for col in ("Workload", "Value", "Op", "System", "n", *HEAD.values()):
            t.add_column(col, justify="right" if col not in ("Workload", "Op", "System") else "left")
        for r in cmp.rows:
            t.add_row(r.workload, f"{r.value_size} B", r.op, inp.baseline.label, str(r.base.n),
                      *[_cell(r.base, m) for m in METRICS])
            t.add_row("", "", "", inp.candidate.label, str(r.cand.n), *[_cell(r.cand, m) for m in METRICS])
            t.add_row("", "", "", "[bold]delta[/bold]", "",
                      *[fmt_pct(r.deltas[m]) + (" ~" if r.noise[m] else "") for m in METRICS], end_section=True)
        console.print(t)
        console.print("Delta: candidate vs baseline; TPS/MB/s positive = better, latencies negative = better.")
        if cmp.missing:
            console.print("[yellow]not compared:[/yellow] " + "; ".join(cmp.missing))
    for run in inp.runs:
        for cell in run.cells:
            if cell.server:
                server_tables(console, run.label, cell)
            gap = run.server_views.get((cell.workload, cell.value_size)) if run.server_views else None
            if gap:
                console.print(f"[dim]server's view ({run.label}, {cell.workload} {cell.value_size} B):[/dim] {gap['claim']}")
    explain_section(console, inp)
    for run in inp.runs:
        for w in run.warnings:
            console.print(f"[yellow]warning ({run.label}):[/yellow] {w}")
        for r in run.problems:
            console.print(f"[red]{run.label}: {r['workload']} {r['value_size']} B #{r['repeat']} "
                          f"{r['status']}:[/red] {r['error']}")


def server_tables(console, label: str, cell) -> None:
    """Per cell: thread role | call | count | p50 | p99 | max | total ms | % of wall; the main-thread
    budget and what its figures are (reporters.base.server_table)."""
    st = server_table(label, cell)
    t = Table(title=st["title"], caption=st["caption"])
    for col in ("Thread role", *st["columns"]):
        t.add_column(col, justify="left" if col in ("Thread role", "Call") else "right")
    for cells, last in st["rows"]:
        t.add_row(*cells, end_section=last)
    console.print(t)
    for text, warn in st["notes"]:
        console.print(f"[yellow]{escape(text)}[/yellow]" if warn else escape(text))


def explain_section(console, inp: ReportInput) -> None:
    entries = inp.explanation if inp.comparison is not None else [e for r in inp.runs for e in (r.explanation or [])]
    if not entries:
        return
    console.rule("[bold]Why[/bold]")
    for e in entries:
        head = f"[bold]{e['workload']} {e['value_size']} B {e['op']} {e['metric'].replace('_us', '')}[/bold]"
        tag = share_tag(e, inp.comparison is not None)
        if tag:
            head += f" [cyan]({tag})[/cyan]"
        console.print(head)
        console.print("  " + e["claim"])
        for c in e.get("caveats", []):
            console.print(f"  [yellow]caveat:[/yellow] {c}")
    for title, lines in model_sections(inp):
        console.rule(f"[bold]{title}[/bold]")
        for line in lines:
            console.print("  " + line)
