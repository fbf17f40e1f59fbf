"""`valkeytrace export`: a recording in the formats other tools read. --perfetto OUT.json: a timeline Perfetto
opens; --hdr PREFIX: the client's latency per cell and op as HdrHistogram files (.hgrm, .hlog); --table
FILE.csv|FILE.parquet: several recordings as one table, a row per recording, cell and op."""
from __future__ import annotations

import io
import json
import os

import click

from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.recording import format as recfmt

PARQUET_EXTRA = "pip install 'valkeytrace[parquet]'"


@click.command()
@click.argument("recordings", nargs=-1, type=click.Path())
@click.option("--perfetto", "out", type=click.Path(dir_okay=False),
              help="Write RECORDING's timeline as Chrome trace-event JSON (open it in ui.perfetto.dev).")
@click.option("--hdr", "hdr_prefix", metavar="PREFIX",
              help="Write each cell and op's client latency as HdrHistogram files: PREFIX_<cell>_<op>.hgrm (the "
                   "percentile distribution, in ms, as memtier and wrk2 write it) and .hlog (an interval log, one "
                   "interval per repeat). Two recordings (a compare's baseline and candidate): "
                   "PREFIX_baseline_... and PREFIX_candidate_....")
@click.option("--table", "table_out", metavar="FILE.csv|FILE.parquet",
              help="Write one row per recording, cell and op with every figure of the report's tables, the label, "
                   "versions and settings (docs/export.md). Parquet needs pyarrow: " + PARQUET_EXTRA + ".")
@click.option("--from", "t_from", type=float, help="--perfetto: start, seconds into each run's measured window.")
@click.option("--to", "t_to", type=float, help="--perfetto: end, seconds into each run's measured window.")
def export(recordings, out, hdr_prefix, table_out, t_from, t_to):
    """Export recordings for other tools: a Perfetto timeline, HdrHistogram files, or one table."""
    chosen = [flag for flag, v in (("--perfetto", out), ("--hdr", hdr_prefix), ("--table", table_out)) if v]
    if len(chosen) != 1:
        raise VTUsageError("give one of --perfetto OUT.json, --hdr PREFIX or --table FILE.csv|FILE.parquet"
                           + (f" (not {' and '.join(chosen)})" if chosen else ""))
    if not recordings:
        raise VTUsageError(f"no recording given: valkeytrace export RECORDING... {chosen[0]} ...")
    if (t_from is not None or t_to is not None) and not out:
        raise VTUsageError("--from and --to choose the window of --perfetto's timeline")
    if out:
        if len(recordings) != 1:
            raise VTUsageError("--perfetto exports one recording's timeline: give one RECORDING")
        _perfetto(recordings[0], out, t_from, t_to)
    elif hdr_prefix:
        _hdr(list(recordings), hdr_prefix)
    else:
        _table(list(recordings), table_out)


def _perfetto(recording: str, out: str, t_from, t_to) -> None:
    from valkeytrace.reporters import perfetto

    if t_from is not None and t_to is not None and t_to <= t_from:
        raise VTUsageError("--to must be after --from")
    recfmt.refuse_overwrite(out, [recording], "--perfetto")
    if os.path.splitext(out)[1].lower() != ".json":
        raise VTUsageError(f"--perfetto {out}: the trace is written as Chrome trace-event JSON: give a .json file")
    doc = recfmt.read(recording)
    trace = perfetto.build(doc, t_from, t_to)
    if not any(e["ph"] == "X" for e in trace["traceEvents"]) and t_from is None and t_to is None:
        backend = (doc.get("settings") or {}).get("backend")
        raise VTError(f"{recording} holds no timeline to export: its runs were traced with --backend {backend}, "
                      "which keeps histograms, not events (an eBPF recording keeps each fsync and blocked interval)")
    if t_from is not None or t_to is not None:
        if not sum(1 for e in trace["traceEvents"] if e["ph"] == "X"):
            raise VTUsageError(f"--from {t_from} --to {t_to}: no slice of {recording} falls in that window "
                               "(seconds into each run's measured window)")
    _write_all({out: json.dumps(trace, separators=(",", ":"))})
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    click.echo(f"wrote {out}: {n} slices; open it in https://ui.perfetto.dev", err=True)


def _hdr(recordings: list, prefix: str) -> None:
    from valkeytrace.analysis.hdr import cell_latencies
    from valkeytrace.recording.model import decode
    from valkeytrace.reporters.hdrfiles import file_stem, hgrm, hlog

    if len(recordings) > 2:
        raise VTUsageError("--hdr takes one recording, or a compare's two (baseline, candidate)")
    folder = os.path.dirname(prefix) or "."
    if not os.path.isdir(folder):
        raise VTUsageError(f"--hdr {prefix}: directory {folder} does not exist")
    sides = ["baseline", "candidate"] if len(recordings) == 2 else [""]
    files: dict[str, str] = {}
    for side, path in zip(sides, recordings):
        doc = decode(recfmt.read(path))
        cells = cell_latencies(doc)
        if not cells:
            raise VTError(f"{path} has no measured op with a latency distribution: nothing to export")
        for c in cells:
            stem = os.path.join(prefix, "") if os.path.isdir(prefix) else prefix + "_"
            stem += (f"{side}_" if side else "") + file_stem(c)
            files[stem + ".hgrm"] = hgrm(c)
            files[stem + ".hlog"] = hlog(c, doc.label)
    for f in files:
        recfmt.refuse_overwrite(f, recordings, "--hdr")
    _write_all(files)
    click.echo(f"wrote {len(files) // 2} .hgrm and {len(files) // 2} .hlog file(s): {prefix}*", err=True)


def _table(recordings: list, out: str) -> None:
    from valkeytrace.analysis.fleet import table_rows
    from valkeytrace.reporters import table

    ext = os.path.splitext(out)[1].lower()
    if ext not in (".csv", ".parquet"):
        raise VTUsageError(f"--table {out}: a table is written as .csv or .parquet, not {ext or 'no extension'}")
    recfmt.refuse_overwrite(out, recordings, "--table")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise VTUsageError(f"--table {out}: directory {os.path.dirname(os.path.abspath(out))} does not exist")
    if ext == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise VTError(f"--table {out}: Parquet needs pyarrow, which is not installed: {PARQUET_EXTRA} "
                          "(or write a .csv)") from None
    rows = []
    for path in recordings:
        rows += table_rows(path, recfmt.read(path))
    if not rows:
        raise VTError("none of these recordings has a measured op: nothing to export")
    if ext == ".csv":
        buf = io.StringIO()
        table.write_csv(rows, buf)
        _write_all({out: buf.getvalue()})
    else:
        try:
            table.write_parquet(rows, out)
        except OSError as exc:
            _remove([out])
            raise VTError(f"cannot write {out}: {exc.strerror or exc}")
    click.echo(f"wrote {out}: {len(rows)} row(s) from {len(recordings)} recording(s)", err=True)


def _write_all(files: dict) -> None:
    """Every file whole, or none: one that cannot be written removes those written before it."""
    done: list[str] = []
    for path, text in files.items():
        try:
            with open(path, "w", encoding="utf-8") as f:
                done.append(path)
                f.write(text)
        except OSError as exc:
            _remove(done)
            raise VTError(f"cannot write {path}: {exc.strerror or exc}")


def _remove(paths: list) -> None:
    for p in paths:
        try:
            os.remove(p)
        except OSError:
            pass
