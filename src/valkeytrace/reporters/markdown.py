"""Markdown: the two tables of valkey#4029, in its columns and delta convention."""
from __future__ import annotations

from valkeytrace.analysis.tables import MEASURED_OP
from valkeytrace.reporters.base import (ReportInput, fmt_ktps, fmt_mbs, fmt_pct, fmt_us, model_sections, overhead_line,
                                        server_note, share_tag)

TITLES = {"read-heavy": "Read-heavy (GET + SET)", "write-only": "Write-only (SET)"}
COLUMNS = "| Value | Op | TPS (K req/s) | MB/s | P50 (µs) | P95 (µs) | P99 (µs) | Notes |"
DELTA_CONVENTION = ("Delta convention: {cand} vs {base}. TPS and MB/s: positive = higher throughput "
                    "(better). P50/P95/P99: negative = lower latency (better). MB/s = TPS × value size "
                    "(TPS × value bytes / 10^6). Each cell is the median of its repeats.")


def _row(label, size, op, o, note=""):
    return (f"| {label} | {size} B | {op} | {fmt_ktps(o.median['tps'])} | {fmt_mbs(o.median['mb_s'])} | "
            f"{fmt_us(o.median['p50_us'])} | {fmt_us(o.median['p95_us'])} | {fmt_us(o.median['p99_us'])} | {note} |")


def _workload_note(run, workload, settings) -> str:
    s = settings or {}
    fsync = run.server.get("appendfsync") or "?"
    if workload == "read-heavy":
        return (f"GET c={s.get('get_clients', '?')} + c={s.get('set_clients', '?')} background SET; "
                f"fsync={fsync}")
    return f"isolated SET c={s.get('write_clients', '?')}; fsync={fsync}"


def render(inp: ReportInput, out) -> None:
    w = out.write
    if inp.comparison is None:
        run = inp.baseline
        w(f"# valkeytrace: {run.label}\n\n")
        if run.emulation:
            w(f"**{run.emulation}** (emulated slow disk).\n\n")
        w(f"Server {run.server.get('version')} ({server_note(run)}), client "
          f"{(run.doc.get('client') or {}).get('name', '?')} {(run.doc.get('client') or {}).get('version', '')}.\n\n")
        for workload in ("read-heavy", "write-only"):
            cells = [c for c in run.cells if c.workload == workload and MEASURED_OP[workload] in c.ops]
            if not cells:
                continue
            w(f"| {TITLES[workload]} {COLUMNS}\n|---|---|---|---|---|---|---|---|---|\n")
            for i, c in enumerate(cells):
                o = c.ops[MEASURED_OP[workload]]
                note = _workload_note(run, workload, run.doc.get("settings")) if i == 0 else ""
                w(_row(run.label, c.value_size, o.op, o, f"{note}{'; ' if note else ''}n={o.n}") + "\n")
            w("\n")
        _warnings(inp, w)
        return

    base, cand, cmp = inp.baseline, inp.candidate, inp.comparison
    w(f"# valkeytrace: {cand.label} vs {base.label}\n\n")
    for run in (base, cand):
        if run.emulation:
            w(f"**{run.label}: {run.emulation}** (emulated slow disk).\n\n")
    w(f"- baseline `{base.label}`: server {base.server.get('version')} ({server_note(base)})\n")
    w(f"- candidate `{cand.label}`: server {cand.server.get('version')} ({server_note(cand)})\n\n")
    for workload in ("read-heavy", "write-only"):
        rows = [r for r in cmp.rows if r.workload == workload and r.op == MEASURED_OP[workload]]
        if not rows:
            continue
        w(f"| {TITLES[workload]} {COLUMNS}\n|---|---|---|---|---|---|---|---|---|\n")
        for i, r in enumerate(rows):
            note = _workload_note(base, workload, base.doc.get("settings")) if i == 0 else ""
            w(_row(base.label, r.value_size, r.op, r.base, note) + "\n")
            w(_row(cand.label, r.value_size, r.op, r.cand) + "\n")
            noisy = [m.replace("_us", "").upper().replace("MB_S", "MB/s") for m, v in r.noise.items() if v]
            dnote = f"within noise: {', '.join(noisy)} (n={r.base.n}/{r.cand.n})" if noisy else ""
            w(f"| delta | {r.value_size} B | {r.op} | {fmt_pct(r.deltas['tps'])} | {fmt_pct(r.deltas['mb_s'])} | "
              f"{fmt_pct(r.deltas['p50_us'])} | {fmt_pct(r.deltas['p95_us'])} | {fmt_pct(r.deltas['p99_us'])} | {dnote} |\n")
        w("\n" + DELTA_CONVENTION.format(cand=cand.label, base=base.label) + "\n\n")
    if cmp.missing:
        w("Not compared (missing on one side): " + "; ".join(cmp.missing) + ".\n\n")
    _warnings(inp, w)


def _why(inp: ReportInput, w):
    entries = inp.explanation if inp.comparison is not None else [e for r in inp.runs for e in (r.explanation or [])]
    if not entries:
        return
    w("## Why\n\n")
    for e in entries:
        tag = share_tag(e, inp.comparison is not None)
        tag = f" ({tag})" if tag else ""
        w(f"- **{e['workload']} {e['value_size']} B {e['op']} {e['metric'].replace('_us', '')}**{tag}: {e['claim']}\n")
        for c in e.get("caveats", []):
            w(f"  - caveat: {c}\n")
    w("\n")
    for title, lines in model_sections(inp):
        w(f"### {title}\n\n" + "".join(f"- {line}\n" for line in lines) + "\n")
    for run in inp.runs:
        for gap in (run.server_views or {}).values():
            w(f"- server's view ({run.label}): {gap['claim']}\n")
    w("\n")


def _warnings(inp: ReportInput, w):
    _why(inp, w)
    for run in inp.runs:
        if overhead_line(run):
            w(f"- {run.label}: {overhead_line(run)}\n")
        if run.emulation:
            w(f"> **{run.label}: {run.emulation}** (an emulated slow disk, not a measured one).\n")
        if not run.doc.get("complete", False):
            w(f"> **{run.label}**: incomplete recording ({run.path}); tables use the runs that finished.\n")
        for warning in run.doc.get("warnings", []):
            w(f"> **{run.label}**: {warning}\n")
