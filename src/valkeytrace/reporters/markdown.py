"""Markdown: the two tables of valkey#4029, in its columns and delta convention; the server's
threads per cell; the explanation."""
from __future__ import annotations

from valkeytrace.analysis.report import ReportInput
from valkeytrace.reporters.sections import caveats_by_cell, finding_title, model_sections
from valkeytrace.analysis import verdict as vd
from valkeytrace.reporters.memory_words import durability_sentence
from valkeytrace.reporters.sentences import exit_sentence, overhead_line, warning_texts
from valkeytrace.reporters.base import (ReplicationTable, ServerTable, client_note, explanation_entries, server_note,
                                       replication_tables, rule_line, server_tables, verdict_lines)
from valkeytrace.reporters.clients import DELTA_CONVENTION, client_tables, failover_line
from valkeytrace.reporters.claims import gap_text, say


def render(inp: ReportInput, out) -> None:
    w = out.write
    for run in inp.runs:  # before anything: a server that ended under the recording
        for e in run.server_exits:
            w(f"**{exit_sentence(run.label, e)}**\n\n")
        lost = durability_sentence(run.label, run.durability_check)
        if lost:
            w(f"**{lost}**\n\n" if run.durability_check.acked_missing else f"{lost}\n\n")
    if inp.comparison is None:
        run = inp.baseline
        w(f"# valkeytrace: {run.label}\n\n")
        if run.emulation:
            w(f"**{run.emulation[0].upper()}{run.emulation[1:]}.**\n\n")
        w(f"Server {run.server.version} ({server_note(run)}), client {client_note(run)}.\n\n")
        _client_tables(inp, w)
        _server_tables(inp, w)
        _replication_tables(inp, w)
        _why(inp, w)
        _notes(inp, w)
        return

    base, cand, cmp = inp.baseline, inp.candidate, inp.comparison
    w(f"# valkeytrace: {cand.label} vs {base.label}\n\n")
    for run in (base, cand):
        if run.emulation:
            w(f"**{run.label}: {run.emulation}.**\n\n")
    w(f"- baseline `{base.label}`: server {base.server.version} ({server_note(base)})\n")
    w(f"- candidate `{cand.label}`: server {cand.server.version} ({server_note(cand)})\n\n")
    _verdict(inp, w)
    _client_tables(inp, w)
    if cmp.missing:
        w("Not compared (missing on one side): " + "; ".join(cmp.missing) + ".\n\n")
    _caveats(inp, w)
    _notes(inp, w)
    w("## Appendix\n\n")
    _server_tables(inp, w)
    _replication_tables(inp, w)
    _why(inp, w)


def _verdict(inp: ReportInput, w):
    w("## Verdict\n\n" + (f"{rule_line(inp)}.\n\n" if rule_line(inp) else ""))
    for (cell, changes), why in verdict_lines(inp):
        w(f"- **{cell}**: {changes}" + (f"  \n  {why}" if why else "") + "\n")
    w("\n")
    fs = vd.findings(inp.verdict or [], inp.explanation or [])
    if fs:
        w("## Why\n\n")
    for f in fs:
        w(f"**{finding_title(f.kind)}** ({', '.join(f.cells)})\n\n" + "".join(f"- {say(s)}\n" for s in f.sides) + "\n")


def _caveats(inp: ReportInput, w):
    items = caveats_by_cell(inp.explanation or [])
    if items:
        w("## Caveats\n\n" + "".join(f"- {text} ({', '.join(cells)})\n" for text, cells in items) + "\n")


def _pipe_table(w, head, rows):
    w("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    w("".join("| " + " | ".join(cells) + " |\n" for cells in rows) + "\n")


def _client_tables(inp: ReportInput, w):
    for t in client_tables(inp):
        _pipe_table(w, (t.title, *t.columns), (cells for cells, _kind in t.rows))
        if t.seed:
            w(f"{t.seed}\n\n")
        if t.memory:
            w("What the server held, the peaks over each cell's windows:\n\n")
            _pipe_table(w, (t.memory.title, *t.memory.columns), t.memory.rows)
            w("".join(f"- {n}\n" for n in t.memory.notes) + ("\n" if t.memory.notes else ""))
    for run in inp.runs:
        if run.failover is not None:  # record --failover
            w(f"{run.label}: {failover_line(run.failover)}\n\n")
    if inp.comparison is not None:
        w(DELTA_CONVENTION.format(cand=inp.candidate.label, base=inp.baseline.label) + "\n\n")


def _titled_tables(w, heading: str, tables: list[ServerTable] | list[ReplicationTable], first: tuple = ()):
    """A section of base.py's tables ({"title", "columns", "rows", "caption"?, "notes"}), each with
    its notes; first: a column before the table's own."""
    if tables:
        w(f"## {heading}\n\n")
    for t in tables:
        w(f"**{t.title}**\n\n")
        _pipe_table(w, (*first, *t.columns), (cells for cells, _last in t.rows))
        w(f"{t.caption}.\n\n" if t.caption else "")
        w("".join(f"- {'**note**: ' if warn else ''}{text}\n" for text, warn in t.notes) + "\n")


def _server_tables(inp: ReportInput, w):
    _titled_tables(w, "Server threads", server_tables(inp), ("Thread role",))


def _replication_tables(inp: ReportInput, w):
    _titled_tables(w, "Replication: a write durable on the primary and its replicas", replication_tables(inp))


def _why(inp: ReportInput, w):
    entries, shared = explanation_entries(inp)
    if not entries:
        return
    w("### The accounting of each change\n\n" if inp.comparison is not None else "## Why\n\n")
    for e in entries:
        tag = f" ({e.tag})" if e.tag else ""
        w(f"- **{e.title}**{tag}: {e.claim}\n")
        for c in e.caveats if inp.comparison is None else ():  # a compare lists them once, above
            w(f"  - caveat: {c}\n")
    if shared and inp.comparison is None:
        w("\nCaveats (each applies to several entries above):\n\n")
        for c, n in shared:
            w(f"- {c} ({n} entries)\n")
    w("\n")
    for title, lines in model_sections(inp):
        w(f"### {title}\n\n" + "".join(f"- {line}\n" for line in lines) + "\n")
    for run in inp.runs:
        for gap in (run.server_views or {}).values():
            w(f"- server's view ({run.label}): {gap_text(gap)}\n")
    w("\n")


def _notes(inp: ReportInput, w):
    for run in inp.runs:
        if overhead_line(run):
            w(f"- {run.label}: {overhead_line(run)}\n")
        if not run.complete:
            w(f"> **{run.label}**: incomplete recording ({run.path}); tables use the runs that finished.\n")
        for warning in warning_texts(run.warnings):
            w(f"> **{run.label}**: {warning}\n")
