"""Text: rich tables with n and spread (min-max) behind each median; noisy deltas marked."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from valkeytrace.analysis.tables import METRICS
from valkeytrace.analysis.report import ReportInput, model_sections, overhead_line, share_tag
from valkeytrace.reporters.base import fmt_pct, server_note

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
                      f"client {c.get('name', '?')} {c.get('version', '')}, recording {run.path}"
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


def _num(v, fmt="{:,.0f}"):
    return "–" if v is None else fmt.format(v)


def server_tables(console, label: str, cell) -> None:
    """Per cell: thread role | call | count | p50 | p99 | max | total ms | % of wall; the main-thread
    budget; event-loop iterations."""
    srv = cell.server
    m = srv["main_thread"]
    wall_ms = m["wall_ms"] or 0
    t = Table(title=f"{label} · {cell.workload} {cell.value_size} B · server threads "
                    f"({srv['backend']}{', calls timed at ' + srv['call_source'] if srv.get('call_source') else ''}, "
                    f"{srv['windows']} window(s), {wall_ms / 1000:.1f} s)",
              caption="socket writes not timed (record --socket-writes)"
              if "socket_write" in (srv.get("untimed") or []) else None)
    for col in ("Thread role", "Call", "Count", "p50 µs", "p99 µs", "max µs", "Total ms", "% of wall"):  # per thread
        t.add_column(col, justify="left" if col in ("Thread role", "Call") else "right")
    for th in srv["threads"]:
        rows = [(call, th[call]) for call in ("fdatasync", "fsync", "aof_write", "socket_write") if th[call]["count"]]
        role = f"{th['role']} ×{th['threads']}" if th["threads"] > 1 else th["role"]
        role_wall = wall_ms * max(1, th["threads"])  # % of the role's thread time
        for i, (call, c) in enumerate(rows):
            t.add_row(role if i == 0 else "", call, f"{c['count']:,}", _num(c["p50_us"]), _num(c["p99_us"]),
                      _num(c["max_us"]), _num(c["total_ms"], "{:,.1f}"),
                      _num(100 * c["total_ms"] / role_wall if wall_ms else None, "{:.1f}%"))
        t.add_row(role if not rows else "", "off-CPU", "", "", "", "", _num(th["off_cpu_ms"], "{:,.1f}"),
                  _num(100 * th["off_cpu_ms"] / role_wall if wall_ms else None, "{:.1f}%"), end_section=True)
    console.print(t)
    parts = [("on CPU", "on_cpu_pct"), ("blocked in fsync", "blocked_in_fsync_pct"),
             ("blocked in AOF write", "blocked_in_aof_write_pct"), ("waiting for CPU", "waiting_for_cpu_pct"),
             ("idle (epoll_wait)", "idle_pct"), ("other blocked", "other_blocked_pct")]
    console.print("main-thread budget: " + ", ".join(f"{name} {m[key]:.1f}%" for name, key in parts
                                                    if m[key] is not None))
    if m.get("on_cpu_measured") is False:
        console.print("  (no scheduler data: \"on CPU\" is the time outside the timed calls, not measured on-CPU time)")
    if m.get("off_cpu_over_wall_pct"):
        console.print(f"  (off-CPU intervals added up to {m['off_cpu_over_wall_pct']:.0f}% of the window, intervals "
                      "straddling its edges; scaled to 100%)")
    if m["loop_iterations"] and not m.get("loop_iterations_counted", True):
        # a sample (the beforeSleep uprobe attached part of the time) and no server count to
        # scale it by (INFO without eventloop_cycles: valkey < 7.2, Redis): not a total
        console.print(f"event loop ({srv.get('loop_source')}): a sample of {m['loop_iterations']:,} iterations "
                      f"(not a total: this server's INFO has no eventloop_cycles), p50 "
                      f"{_num(m['loop_iteration_p50_us'])} µs, p99 {_num(m['loop_iteration_p99_us'])} µs"
                      + (f"; {m['aof_flushes']:,} AOF flushes" if m["aof_flushes"] else ""))
    elif m["loop_iterations"]:
        sampled = m.get("loop_iterations_sampled")
        if not sampled:
            dist = "no distribution (record --loop-sample)"
        else:
            dist = (f"p50 {_num(m['loop_iteration_p50_us'])} µs, p99 {_num(m['loop_iteration_p99_us'])} µs"
                    + (f" (of {sampled:,} sampled)" if sampled < m["loop_iterations"] else ""))
        mean = f"mean {m['loop_iteration_mean_us']:,.1f} µs, " if m.get("loop_iteration_mean_us") else ""
        console.print(f"event loop ({srv.get('loop_source')}): {m['loop_iterations']:,} iterations, "
                      f"{m['loop_iterations_per_s']:,.0f}/s, {mean}{dist}"
                      + (f"; {m['aof_flushes']:,} AOF flushes" if m["aof_flushes"] else ""))
    else:
        console.print("event loop: not measured (this server's INFO has no eventloop_cycles, as in valkey < 7.2 "
                      "and Redis; record --loop-sample samples iteration durations)")
    cc = srv.get("cross_check")
    if cc:
        f = cc["fdatasync"]
        console.print(f"main-thread fdatasync, both backends: ebpf {f['ebpf_count']:,} (p50 {_num(f['ebpf_p50_us'])} µs)"
                      f" · shim {f['shim_count']:,} (p50 {_num(f['shim_p50_us'])} µs); counts differ by "
                      f"{f['count_diff_pct']:.1f}%")
    lost = srv["lost_events"]
    console.print(f"main-thread blocked intervals recorded: {srv['blocked_events']:,}; lost events: {lost}"
                  + ("  [red](events were lost: the timeline is incomplete)[/red]" if lost else ""))


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
