"""`valkeytrace predict BASELINE.vtrace [CHANGES]`: what a setting nobody recorded would do, from the
pipeline model calibrated on one recording (analysis/predict.py). Offline, no root."""
from __future__ import annotations

import io
import os
import sys

import click

from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.recording import format as recfmt

BY_EXTENSION = {".md": "markdown", ".json": "json", ".txt": "text"}


@click.command()
@click.argument("recording", type=click.Path(dir_okay=False))
@click.option("--emulate-offload", "offload", type=click.Choice(["durable", "early-ack", "none"]),
              help="The fsync off the main thread (durable: replies to writes held until durable; early-ack: not "
                   "held), or none: back on the main thread (appendfsync always).")
@click.option("--offload-gather", "gather", metavar="DURATION|auto",
              help="The durable offload's gather window (record --offload-gather); auto: the smallest window under "
                   "which one job carries every write client's write (one cohort), as the model finds it.")
@click.option("--offload-design", "design", type=click.Choice(["bio-write", "bio-write-block", "main-write"]),
              help="The durable offload's hand-off (record --offload-design): bio-write-block's main thread waits "
                   "while a job runs; main-write's main thread writes, its jobs only fdatasync.")
@click.option("--inject-fsync-delay", "inject", metavar="DURATION|none",
              help="A new emulated delay per fdatasync instead of the recording's (e.g. 6ms, lognormal:4ms,0.3, "
                   "2ms,stall:1s/2.5s; none: the disk's own).")
@click.option("--offload-replicas", "offload_replicas", type=click.Choice(["immediate", "committed"]),
              help="A replicated recording whose stream left at once: committed predicts its replica lag had the "
                   "stream waited for durability (each write's wait for its sync, from the kernel's timestamps).")
@click.option("--appendfsync", type=click.Choice(["always", "everysec", "no"]),
              help="The server's appendfsync (the baseline's: always, with or without an offload).")
@click.option("--io-threads", type=click.IntRange(min=1), help="The server's io-threads (the model: 1 or 2).")
@click.option("--get-clients", type=click.IntRange(min=1), help="GET clients (read-heavy).")
@click.option("--set-clients", type=click.IntRange(min=0), help="Background SET clients (read-heavy).")
@click.option("--write-clients", type=click.IntRange(min=1), help="SET clients (write-only).")
@click.option("--rates", metavar="R1,R2,...",
              help="Open loop: the measured op sent at each of these rates (requests/s, Poisson arrivals), latency "
                   "from each request's due moment: the latency-throughput curve the model gives.")
@click.option("--workload", type=click.Choice(["read-heavy", "write-only", "all"]), default="all", show_default=True)
@click.option("--sizes", help="Value sizes to predict (default: every size recorded).")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default=None,
              help="text, markdown or json (default: from -o's extension, else text).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout.")
def predict(recording, offload, gather, design, inject, offload_replicas, appendfsync, io_threads, get_clients, set_clients,
            write_clients, rates,
            workload, sizes, fmt, output):
    """Predict the #4029 tables of a configuration from one recording of another.

    The model (a discrete-event simulation of the clients, the main thread and the durability work)
    is calibrated from RECORDING alone; every figure it used is printed with its source.
    """
    from valkeytrace.analysis import predict as model
    from valkeytrace.cli.options import parse_rates, parse_sizes
    from valkeytrace.tracers.emulation import parse_fsync_delay, parse_gather

    if output:
        recfmt.refuse_overwrite(output, [recording])
        ext = os.path.splitext(output)[1].lower()
        if ext and ext not in BY_EXTENSION:
            raise VTUsageError(f"-o {output}: a prediction is written as text, markdown or JSON "
                               f"({', '.join(sorted(BY_EXTENSION))}), not {ext}")
        fmt = fmt or BY_EXTENSION.get(ext)
    fmt = fmt or "text"
    doc = recfmt.read(recording)
    delay = None
    if inject is not None:
        delay = {} if inject.strip().lower() in ("none", "0") else parse_fsync_delay(inject)
    auto = gather is not None and gather.strip().lower() == "auto"
    gather_us = None if gather is None or auto else parse_gather(gather) / 1e3
    mode = offload
    if gather_us or auto or design:
        from valkeytrace.analysis.calls import durable_by
        from valkeytrace.recording.model import decode
        who = durable_by(decode(doc))
        if (mode or who.mode) != "durable":  # the recording's own durable offload, emulated or the server's
            what = "--offload-gather" if gather_us or auto else "--offload-design"
            raise VTUsageError(f"{what} shapes the durable offload's jobs: add --emulate-offload durable")
    change = model.Change(**_settings(doc, appendfsync, io_threads, offload, dict(
        offload=mode, gather_us=gather_us, design=design, fsync_delay=delay, get_clients=get_clients,
        set_clients=set_clients, write_clients=write_clients)))
    wanted = set(parse_sizes(None, None, sizes)) if sizes else None
    cells = [(w, s) for w, s in model.cells_of(doc)
             if (workload == "all" or w == workload) and (wanted is None or s in wanted)]
    if not cells:
        raise VTError(f"{recording} has no measured {'' if workload == 'all' else workload + ' '}cell"
                      f"{' of those sizes' if wanted else ''} to predict from")
    if auto:
        change = _auto_gather(doc, cells, change)
    pred = model.predict(doc, change, cells, rates=list(parse_rates(rates)) if rates else None)
    if offload_replicas == "committed":
        pred.replicas = model.replica_lag(doc, cells)
        if not pred.replicas:
            raise VTUsageError("--offload-replicas committed predicts a replica's lag: the recording has no replica "
                               "(record --replicas N)")
    if not pred.cells:
        raise VTError(f"nothing predicted: {'; '.join(pred.errors)}")
    _write(pred, fmt, output)


def _write(pred, fmt: str, output: str | None) -> None:
    from valkeytrace.reporters.prediction import RENDER

    buf = io.StringIO()
    RENDER[fmt](pred, buf)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(buf.getvalue())
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(buf.getvalue())


def _settings(doc: dict, appendfsync: str | None, io_threads: int | None, offload: str | None, given: dict) -> dict:
    """The Change's keywords: --appendfsync/--io-threads as the compare's what-if reads a candidate's
    (whatif.settings_change), then the options given."""
    from valkeytrace.analysis.whatif import settings_change

    if appendfsync and offload:
        raise VTUsageError(f"--appendfsync {appendfsync} with --emulate-offload {offload}: the offload moves appendfsync "
                           "always's fsync; give one of the two")
    settings = {} if appendfsync is None and io_threads is None else settings_change(doc, appendfsync, io_threads)
    return {**settings, **{k: v for k, v in given.items() if v is not None}}


def _auto_gather(doc: dict, cells: list, change):
    """--offload-gather auto: the model's smallest one-cohort window, from the first write-only cell."""
    import dataclasses

    from valkeytrace.analysis import predict as model
    from valkeytrace.analysis.calibration import CalibrationError, calibrate

    size = next((s for w, s in cells if w == "write-only"), None)
    if size is None:
        raise VTUsageError("--offload-gather auto chooses the window on a write-only cell: the recording (or "
                           "--workload) has none")
    try:
        found = model.one_cohort_window(calibrate(doc, "write-only", size), change)
    except CalibrationError as exc:
        raise VTError(f"--offload-gather auto: {exc}") from None
    if found["gather_us"] is None:
        raise VTError(f"--offload-gather auto: no window up to {model.GATHER_GRID_US[-1] / 1000:g} ms gives one "
                      "cohort in the model")
    click.echo(f"note: --offload-gather auto: {found['gather_us'] / 1000:g} ms, the smallest window under which one "
               f"job carries every one of the {found['clients']} write clients' writes (model)", err=True)
    return dataclasses.replace(change, gather_us=float(found["gather_us"]))
