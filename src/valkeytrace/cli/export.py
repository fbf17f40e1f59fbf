"""`valkeytrace export RECORDING --perfetto OUT.json`: a timeline Perfetto opens."""
from __future__ import annotations

import json
import os

import click

from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.recording import format as recfmt


@click.command()
@click.argument("recording", type=click.Path())
@click.option("--perfetto", "out", required=True, type=click.Path(dir_okay=False),
              help="Write Chrome trace-event JSON (open it in ui.perfetto.dev).")
@click.option("--from", "t_from", type=float, help="Start, seconds into each run's measured window.")
@click.option("--to", "t_to", type=float, help="End, seconds into each run's measured window.")
def export(recording, out, t_from, t_to):
    """Export a recording's per-thread timeline for Perfetto."""
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
    try:
        with open(out, "w") as f:
            json.dump(trace, f, separators=(",", ":"))
    except OSError as exc:
        raise VTError(f"cannot write {out}: {exc.strerror or exc}")
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    click.echo(f"wrote {out}: {n} slices; open it in https://ui.perfetto.dev", err=True)
