"""HTML: one self-contained page (inline SVG plots, no script, no external resource), rendered
from the analysed input with the same tables and sentences as the markdown report: each
emulation banner once at the top, a caveat shared by every explanation once, no markdown syntax."""
from __future__ import annotations

import io
from html import escape

from valkeytrace.analysis.report import ReportInput
from valkeytrace.reporters.sections import caveats_by_cell, finding_title, model_sections
from valkeytrace.analysis import verdict as vd
from valkeytrace.reporters.sentences import exit_sentence, overhead_line, warning_texts
from valkeytrace.reporters.clients import DELTA_CONVENTION, client_tables, failover_line
from valkeytrace.reporters.base import (client_note, explanation_entries, server_note,
                                       replication_tables, rule_line, server_tables, verdict_lines)
from valkeytrace.reporters.claims import gap_text, say
from valkeytrace.reporters.memory_words import durability_sentence

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}tr.delta td{font-weight:bold;background:#f4f4f4}
table.server td:nth-child(2){text-align:left}tr.last td{border-bottom:2px solid #999}
caption{text-align:left;font-weight:bold;padding:.3em 0}
.emu{background:#fde2e2;border:1px solid #c44e52;padding:.6em;font-weight:bold}
.why li{margin:.5em 0}.caveat{color:#8a6d00}.warn{color:#8a3b00}figure{margin:1.5em 0}
svg{max-width:100%;height:auto}code{background:#f2f2f2;padding:0 .25em}
nav#toc{border:1px solid #ddd;padding:.3em 1em;display:inline-block}details summary h2{display:inline}
ul.verdict li{margin:.4em 0}ul.verdict span{color:#444}
"""


CAPTIONS = {
    "latency_cdf": "Client latency CDF per cell: every repeat of each system (solid: baseline, dashed: candidate); "
                   "a step between repeats is the server's path, a shift between systems the change.",
    "budget": "Where the main thread's wall time went, per system and cell (the server-side tables have the figures).",
    "fsync_hist": "fdatasync/fsync latency per cell, by system and thread role: which thread pays for durability.",
    "blocked_timeline": "The main thread's blocked intervals (and fsync calls) over the first seconds of a run.",
    "latency_throughput": "Open loop: p50 (solid) and p99 (dashed) from each request's due moment against the rate "
                          "achieved, per side; a hollow point is a rate the side did not keep up with.",
    "memory": "What the server held over a window, sampled at 20 Hz: replies held until durable (the virtual "
              "offload's), valkey's AOF buffer with the offload's queue, the server's RSS; injected stalls shaded.",
}


def _p(text: str, cls: str = "") -> str:
    return f"<p{f' class={cls!r}' if cls else ''}>{escape(text)}</p>"


def _table(head, rows, cls: str = "", caption: str = "") -> str:
    """rows: (cells, the row's class or "")"""
    return (f"<table{f' class={cls!r}' if cls else ''}>" + (f"<caption>{escape(caption)}</caption>" if caption else "")
            + "<tr>" + "".join(f"<th>{escape(c)}</th>" for c in head) + "</tr>"
            + "".join(f"<tr{f' class={k!r}' if k else ''}>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
                      for cells, k in rows) + "</table>")


def _client_tables(inp: ReportInput) -> list[str]:
    out = []
    for t in client_tables(inp):
        out.append(_table((t.title, *t.columns), t.rows))
        if t.seed:
            out.append(_p(t.seed))
        if t.memory:
            out.append(_table((t.memory.title, *t.memory.columns), [(r, "") for r in t.memory.rows], "memory",
                              "What the server held, the peaks over each cell's windows"))
            out += [_p(n) for n in t.memory.notes]
    out += [_p(f"{run.label}: {failover_line(run.failover)}") for run in inp.runs if run.failover is not None]
    if inp.comparison is not None:
        out.append(_p(DELTA_CONVENTION.format(cand=inp.candidate.label, base=inp.baseline.label)))
    return out


def _server_tables(inp: ReportInput) -> list[str]:
    out = []
    for t in server_tables(inp):
        out.append(_table(("Thread role", *t.columns), ((cells, "last" if last else "") for cells, last in t.rows),
                          cls="server", caption=t.title))
        if t.caption:
            out.append(_p(t.caption + "."))
        out.append("<ul class='server-notes'>" + "".join(
            f"<li{' class=warn' if warn else ''}>{escape(text)}</li>" for text, warn in t.notes) + "</ul>")
    return out


def _why(inp: ReportInput) -> list[str]:
    entries, shared = explanation_entries(inp)
    out = []
    if entries:
        out.append("<ul class='why'>")
        for e in entries:
            tag = f" ({escape(e.tag)})" if e.tag else ""
            caveats = "".join(f"<li class='caveat'>caveat: {escape(c)}</li>" for c in e.caveats
                              if inp.comparison is None)  # a compare lists them once, above
            out.append(f"<li><b>{escape(e.title)}</b>{tag}: {escape(e.claim)}"
                       + (f"<ul>{caveats}</ul>" if caveats else "") + "</li>")
        out.append("</ul>")
        if shared and inp.comparison is None:
            out.append("<p class='caveat'>Caveats (each applies to several entries above):</p><ul>"
                       + "".join(f"<li class='caveat'>{escape(c)} ({n} entries)</li>" for c, n in shared) + "</ul>")
    for title, lines in model_sections(inp):
        out.append(f"<h3>{escape(title)}</h3><ul>" + "".join(f"<li>{escape(x)}</li>" for x in lines) + "</ul>")
    views = [(run.label, gap_text(gap)) for run in inp.runs for gap in (run.server_views or {}).values()]
    if views:
        out.append("<h3>The server's own view</h3><ul>"
                   + "".join(f"<li>{escape(label)}: {escape(claim)}</li>" for label, claim in views) + "</ul>")
    return out


def _notes(inp: ReportInput) -> list[str]:
    out = []
    for run in inp.runs:
        if overhead_line(run):
            out.append(_p(f"{run.label}: {overhead_line(run)}"))
        if not run.complete:
            out.append(_p(f"{run.label}: incomplete recording ({run.path}); tables use the runs that finished.", "warn"))
        out += [_p(f"{run.label}: {w}", "warn") for w in warning_texts(run.warnings)]
        out += [_p(f"{run.label}: {p.workload} {p.value_size} B #{p.repeat} {p.status}: {p.error}", "warn")
                for p in run.problems]
    return out


def _figures(inp: ReportInput) -> list[str]:
    from valkeytrace.reporters import plots

    out = []
    for name, fig in plots.make_all(inp).items():
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", dpi=110)
        plots.plt.close(fig)
        svg = buf.getvalue()
        svg = svg[svg.find("<svg"):]  # drop the XML prolog: inline in HTML
        out.append(f'<figure id="{name}">{svg}<figcaption>{escape(CAPTIONS.get(name, name))}</figcaption></figure>')
    return out


def _verdict(inp: ReportInput) -> list[str]:
    out = ["<h2 id='verdict'>Verdict</h2>" + (_p(rule_line(inp) + ".") if rule_line(inp) else "") + "<ul class='verdict'>"]
    for (cell, changes), why in verdict_lines(inp):
        out.append(f"<li><b>{escape(cell)}</b>: {escape(changes)}" + (f"<br><span>{escape(why)}</span>" if why else "")
                   + "</li>")
    out.append("</ul>")
    fs = vd.findings(inp.verdict or [], inp.explanation or [])
    if fs:
        out.append("<h2 id='why'>Why</h2>")
    for f in fs:
        out.append(f"<p><b>{escape(finding_title(f.kind))}</b> ({escape(', '.join(f.cells))})</p><ul>"
                   + "".join(f"<li>{escape(say(x))}</li>" for x in f.sides) + "</ul>")
    items = caveats_by_cell(inp.explanation or [])
    if items:
        out.append("<h2 id='caveats'>Caveats</h2><ul>" + "".join(
            f"<li class='caveat'>{escape(text)} ({escape(', '.join(cells))})</li>" for text, cells in items) + "</ul>")
    return out


def _replication(inp: ReportInput) -> list[str]:
    tables = replication_tables(inp)
    if not tables:
        return []
    out = ["<h2 id='replication'>Replication: a write durable on the primary and its replicas</h2>"]
    for t in tables:
        out.append(_table(t.columns, ((cells, "last" if last else "") for cells, last in t.rows),
                          cls="server", caption=t.title))
        out.append("<ul class='server-notes'>" + "".join(
            f"<li{' class=warn' if warn else ''}>{escape(text)}</li>" for text, warn in t.notes) + "</ul>")
    return out


def _details(anchor: str, title: str, parts: list[str]) -> list[str]:
    if not parts:
        return []
    return [f"<details id='{anchor}'><summary><h2>{escape(title)}</h2></summary>"] + parts + ["</details>"]


def render(inp: ReportInput, out) -> None:
    head, body = [], []
    for run in inp.runs:  # before anything: a server that ended under the recording
        for e in run.server_exits:
            head.append(_p(exit_sentence(run.label, e), "emu"))
        lost = durability_sentence(run.label, run.durability_check)
        if lost:
            head.append(_p(lost, "emu" if run.durability_check.acked_missing else ""))
    if inp.comparison is None:
        run = inp.baseline
        head.append(f"<h1>valkeytrace: {escape(run.label)}</h1>")
        if run.emulation:
            head.append(_p(f"{run.emulation[0].upper()}{run.emulation[1:]}.", "emu"))
        head.append(_p(f"Server {run.server.version} ({server_note(run)}), client {client_note(run)}."))
    else:
        base, cand = inp.baseline, inp.candidate
        head.append(f"<h1>valkeytrace: {escape(cand.label)} vs {escape(base.label)}</h1>")
        if base.emulation and base.emulation == cand.emulation:
            head.append(_p(f"{base.emulation[0].upper()}{base.emulation[1:]} (both).", "emu"))
        else:
            head += [_p(f"{run.label}: {run.emulation}.", "emu") for run in (base, cand) if run.emulation]
        head.append("<ul>" + "".join(
            f"<li>{role} <code>{escape(run.label)}</code>: server {escape(str(run.server.version))} "
            f"({escape(server_note(run))})</li>" for role, run in (("baseline", base), ("candidate", cand))) + "</ul>")
        body += _verdict(inp)
    body.append("<h2 id='tables'>The #4029 tables</h2>")
    body += _client_tables(inp)
    if inp.comparison is not None and inp.comparison.missing:
        body.append(_p("Not compared (missing on one side): " + "; ".join(inp.comparison.missing) + "."))
    body += _replication(inp)
    body += _notes(inp)
    figures = _figures(inp)
    if figures:
        body.append("<h2 id='plots'>Plots</h2>")
        body += figures
    body += _details("threads", "Appendix: server threads", _server_tables(inp))
    body += _details("accounting", "Appendix: the accounting of each change" if inp.comparison is not None
                     else "Appendix: why", _why(inp))
    toc = [(a, t) for a, t in (("verdict", "Verdict"), ("why", "Why"), ("caveats", "Caveats"), ("tables", "The #4029 tables"),
                               ("replication", "Replication"), ("plots", "Plots"), ("threads", "Server threads"), ("accounting", "Accounting"))
           if f"id='{a}'" in "".join(body)]
    nav = "<nav id='toc'><b>Contents</b><ul>" + "".join(f"<li><a href='#{a}'>{t}</a></li>" for a, t in toc) + "</ul></nav>"
    out.write("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>valkeytrace report</title>"
              f"<style>{STYLE}</style></head><body>\n" + "\n".join(head + [nav] + body) + "\n</body></html>\n")
