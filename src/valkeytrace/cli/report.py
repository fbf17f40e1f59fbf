"""`valkeytrace report REC` and `report --compare BASE CAND`: offline, no root, no bcc, no server."""
from __future__ import annotations

import io
import os
import sys

import click

from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.recording import document
from valkeytrace.recording import format as recfmt

# format -> reporter module; imported when used, so that `valkeytrace record` (which shares the
# command line) never loads the analysis stack (numpy, scipy: docs/performance.md, the tracer's own cost)
RENDERERS = {"text": "text", "markdown": "markdown", "json": "jsonfmt", "csv": "csvfmt", "html": "html"}
# -o FILE's extension chooses the format when --format is not given
BY_EXTENSION = {".md": "markdown", ".markdown": "markdown", ".json": "json", ".csv": "csv", ".html": "html",
                ".htm": "html", ".txt": "text"}


def _renderer(fmt: str):
    import importlib

    return importlib.import_module(f"valkeytrace.reporters.{RENDERERS[fmt]}").render


@click.command()
@click.argument("recordings", nargs=-1, type=click.Path(dir_okay=True))
@click.option("--compare", "compare_paths", nargs=2, type=click.Path(), metavar="BASELINE CANDIDATE",
              help="Compare two recordings (candidate vs baseline).")
@click.option("--format", "fmt", type=click.Choice(list(RENDERERS)), default=None,
              help="text, markdown, json, csv or html (default: from -o's extension, else text).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False), help="Also write the plots as PNG into DIR.")
@click.option("--label", "labels", nargs=2, metavar="BASELINE CANDIDATE",
              help="Name the two compared systems (default: their recordings' labels; two recordings with one "
                   "label are told apart by their file names).")
@click.option("--detail", is_flag=True, help="Text: add the per-thread tables, the full accounting of each change, "
              "the intervention and the what-if (markdown and HTML keep them in an appendix).")
@click.option("--overload", is_flag=True,
              help="One table of RECORDING... (open-loop SETs under a stalling disk, one per side: always, everysec, "
                   "the offload with and without a bound): latency during and outside the stalls, what the server "
                   "held in memory, rejected writes, acknowledged writes lost. Text, markdown or JSON.")
@click.option("--durability", is_flag=True,
              help="One table of RECORDING... (open-loop SETs recorded with --verify-durability power-cut, one per "
                   "side: always, everysec, the durable offload, with or without a stalling disk): acknowledged "
                   "writes, those lost at a power cut, the oldest lost write's age, the clients' p50/p99. Text, "
                   "markdown, JSON or HTML.")
@click.option("--no-whatif", is_flag=True,
              help="--compare: without the what-if (the baseline's model predicting the candidate's configuration, a "
                   "simulation of 2-15 s of CPU a cell, kept in the cache after): the rest of the report is the same.")
def report(recordings, compare_paths, fmt, output, plot_dir, labels, detail, overload, durability, no_whatif):
    """Render the #4029 tables from RECORDING, or compare two recordings."""
    if overload or durability:
        _table(list(recordings), compare_paths, fmt, output, "durability" if durability else "overload")
        return
    if compare_paths and recordings:
        raise VTUsageError("give RECORDING or --compare BASELINE CANDIDATE, not both")
    paths = list(compare_paths) if compare_paths else list(recordings)
    if not paths:
        raise VTUsageError("no recording given: valkeytrace report RECORDING, or --compare BASELINE CANDIDATE")
    if len(paths) > 1 and not compare_paths:
        raise VTUsageError("several recordings given: use --compare BASELINE CANDIDATE to compare two")
    if compare_paths and all(os.path.exists(p) for p in paths) and os.path.samefile(*paths):
        raise VTUsageError(f"--compare {paths[0]} {paths[1]}: a recording compared with itself has nothing to show")
    fmt = _format(output, fmt, paths)
    from valkeytrace.analysis import report as analysis

    docs = [(p, recfmt.read(p)) for p in paths]
    for p, d in docs:
        runs = document.outcomes(d)
        if not any(r.status == "ok" for r in runs):
            raise VTError(f"{p} has no measured run ({len(runs)} run(s), none ok): nothing to report")
    if labels and not compare_paths:
        raise VTUsageError("--label BASELINE CANDIDATE names the two sides of --compare")
    if compare_paths:
        name_sides(docs, labels)
    inp = analysis.analyse(docs, with_whatif=not no_whatif)
    inp.detail = detail
    if inp.comparison is not None and not inp.comparison.rows:
        raise VTError(f"{paths[0]} and {paths[1]} share no measured cells "
                      f"({'; '.join(inp.comparison.missing) or 'both empty'})")
    if plot_dir:
        from valkeytrace.reporters import plots

        try:
            written = plots.write_png(inp, plot_dir)
        except OSError as exc:
            raise VTError(f"--plot {plot_dir}: {exc.strerror or exc}")
        click.echo(f"wrote {len(written)} plot(s) to {plot_dir}", err=True)
    _emit(lambda out: _renderer(fmt)(inp, out), fmt, output)


def _format(output: str | None, fmt: str | None, paths: list) -> str:
    """The report's format (from -o's extension, else text); -o never names an input or disagrees with it."""
    if output:
        recfmt.refuse_overwrite(output, paths)
        ext = os.path.splitext(output)[1].lower()
        if ext and ext not in BY_EXTENSION:
            raise VTUsageError(f"-o {output}: a report is written as text, markdown, JSON, CSV or HTML "
                               f"({', '.join(sorted(BY_EXTENSION))}), not {ext}")
        if ext and fmt and BY_EXTENSION[ext] != fmt:
            raise VTUsageError(f"-o {output} names {BY_EXTENSION[ext]} but --format is {fmt}: give one or make them agree")
    return fmt or BY_EXTENSION.get(os.path.splitext(output or "")[1].lower(), "text")


def _emit(render, fmt: str, output: str | None) -> None:
    """render(out) to the terminal (text: rich may colour it) or, whole, to -o's file."""
    if not output and fmt == "text":
        render(sys.stdout)
        return
    buf = io.StringIO()
    render(buf)
    if output:
        outdir = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(outdir):
            raise VTUsageError(f"-o {output}: directory {outdir} does not exist")
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(buf.getvalue())
        except OSError as exc:
            raise VTError(f"cannot write {output}: {exc.strerror or exc}")
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(buf.getvalue())


def _table(paths: list, compare_paths, fmt: str | None, output: str | None, which: str) -> None:
    """report --overload | --durability REC...: one row per recording's open-loop SET cell (analysis/overload.py,
    analysis/powercut.py)."""
    import importlib

    from valkeytrace.analysis.tables import summarize
    from valkeytrace.recording.model import decode

    analysis = importlib.import_module("valkeytrace.analysis." + {"overload": "overload", "durability": "powercut"}[which])
    render = importlib.import_module("valkeytrace.reporters." + {"overload": "overload",
                                                                 "durability": "durability_table"}[which]).RENDER
    if compare_paths or not paths:
        raise VTUsageError(f"--{which} takes the recordings themselves: valkeytrace report --{which} REC...")
    fmt = _format(output, fmt, paths)
    if fmt not in render:
        raise VTUsageError(f"--{which} renders {', '.join(render)}, not {fmt}")
    table = []
    for p in paths:
        d = decode(recfmt.read(p))
        table += analysis.rows(d, summarize(d))
    if not table:
        raise VTError("none of these recordings has an open-loop SET cell (record --workload write-only --rate R)")
    _emit(lambda out: render[fmt](table, out), fmt, output)


def name_sides(docs: list, labels) -> None:
    """The two sides' names, in memory only (the recordings are never written): --label's, else
    their own; two recordings with one label (an A/A pair, two builds recorded under one setting)
    get their file names beside it, so that no sentence of the report can mean either side."""
    if labels:
        if labels[0] == labels[1]:
            raise VTUsageError(f"--label {labels[0]} {labels[1]}: the two sides need two names")
        for (_, d), name in zip(docs, labels):
            d["label"] = name
        return
    (pa, a), (pb, b) = docs
    la, lb = document.label_of(a), document.label_of(b)
    if la == lb:
        na, nb = os.path.basename(pa), os.path.basename(pb)
        if na == nb:
            na, nb = pa, pb
        a["label"], b["label"] = f"{la} [{na}]", f"{lb} [{nb}]"
