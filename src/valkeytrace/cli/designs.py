"""`valkeytrace compare --designs always,bio-write,bio-write-block,main-write -o DIR [record options]`: the designs
of valkey #3381's thread (2026-05-26) side by side. Each design is three recordings on fresh servers, one after
the other: the common options' matrix (the #4029 shape: GET from read-heavy, SET from write-only), a write-only
open loop under a disk that stalls 3 s in every 6 s and blocks writes during its sync (the memory the server
keeps, the clients' p99 during the stalls, main-write's postponements, bio-write-block's waits), and a power cut
(acknowledged writes lost). `always` is the stock server; the others the virtual offload (--emulate-offload
durable --offload-design D). It ends with one table, a row per design (analysis/designs.py,
reporters/designs_table.py), also written as DIR/designs.md and DIR/designs.json (made anew from the recordings
each run). A complete recording already in DIR, made with the same options (DIR/.designs.json), is kept: an
interrupted run resumes where it stopped; other options or an incomplete recording are refused.
"""
from __future__ import annotations

import dataclasses
import os
import sys

import click

from valkeytrace import plan as planning
from valkeytrace.cli.options import build_kwargs
from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.recording.model import FsyncDelay, decode_as

STALL_SPEC = "stall:3s/6s,blocks-writes"  # added to the common --inject-fsync-delay for the stall phase
STALL_RATE, STALL_S, CUT_RATE, CUT_S = 5000.0, 8.0, 3000.0, 3.0
PHASES = ("shape", "stall", "cut")


def parse_designs(text: str) -> list[str]:
    from valkeytrace.tracers.offload import DESIGNS

    known = ("always",) + DESIGNS
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names or any(x not in known for x in names):
        raise VTUsageError(f"--designs {text!r}: expected a comma-separated list of {', '.join(known)}")
    return list(dict.fromkeys(names))


def refuse_side_options(ctx: click.Context) -> None:
    """--designs records every design on the common options: a per-side option or --launches is refused, not ignored."""
    given = sorted(k for k, v in ctx.params.items() if k.startswith(("baseline_", "candidate_")) and v)
    if given or ctx.get_parameter_source("launches") != click.core.ParameterSource.DEFAULT:
        what = "--" + given[0].replace("_", "-") if given else "--launches"
        raise VTUsageError(f"compare --designs records each design on the common options: {what} does not apply")


def design_plans(common: planning.RecordPlan, design: str) -> dict:
    """{phase: RecordPlan} of one design."""
    from valkeytrace.tracers.emulation import parse_fsync_delay

    side = common if design == "always" else common.for_side(offload="durable").with_design(design)
    side = dataclasses.replace(side, label=design, measure_overhead=False)
    delay = decode_as(common.emulation.fsync_delay or {}, FsyncDelay)
    if delay.stall_ns or delay.blocks_writes:
        raise VTUsageError("compare --designs adds its own stall (" + STALL_SPEC + "): give --inject-fsync-delay "
                           "without a stall or blocks-writes")
    stall_delay = parse_fsync_delay(f"{delay.spec},{STALL_SPEC}" if delay.spec else STALL_SPEC)
    write_only = dataclasses.replace(side.settings, workloads=("write-only",), repeat=1, sensitivity=(), set_rate=None)
    stall = dataclasses.replace(side, settings=dataclasses.replace(write_only, rates=(STALL_RATE,), duration_s=STALL_S,
                                                                   pool="grow"),
                                emulation=dataclasses.replace(side.emulation, fsync_delay=stall_delay),
                                verify_durability="", torn=False)
    cut = dataclasses.replace(side, settings=dataclasses.replace(write_only, rates=(CUT_RATE,), duration_s=CUT_S),
                              verify_durability="power-cut", torn=False)
    for p in (side, stall, cut):
        p.check_target()
        p.check()
    return {"shape": side, "stall": stall, "cut": cut}


def compare_designs(text: str, outdir: str, common: dict, dry_run: bool) -> None:
    designs = parse_designs(text)
    common_plan = planning.build(planning.RecordOptions(**build_kwargs(common)))
    if common_plan.emulation.offload:
        raise VTUsageError("compare --designs sets each design's offload itself")
    plans = {d: design_plans(common_plan, d) for d in designs}
    if dry_run:
        from valkeytrace.cli.record import describe_plan

        for d in designs:
            for ph in PHASES:
                click.echo(f"{d} ({ph}): " + "; ".join(describe_plan(plans[d][ph])[:2]))
        return
    parent = os.path.dirname(os.path.abspath(outdir))
    if not os.path.isdir(parent):
        raise VTUsageError(f"-o {outdir}: directory {parent} does not exist")
    os.makedirs(outdir, exist_ok=True)
    _same_options(outdir, plans)
    paths = _record_all(outdir, designs, plans)
    _table(outdir, designs, paths)


def _same_options(outdir: str, plans: dict) -> None:
    """A directory resumed holds recordings of these plans only (DIR/.designs.json, written on the first run):
    one made with other options is refused, not mixed into the table."""
    import json

    stamp = os.path.join(outdir, ".designs.json")
    mine = {f"{d}-{ph}": json.loads(dataclasses.replace(p, output=None, notes=()).as_json())
            for d, by in plans.items() for ph, p in by.items()}
    there: dict = {}
    if os.path.exists(stamp):
        with open(stamp) as f:
            there = json.load(f)
    elif any(n.endswith(".vtrace") for n in os.listdir(outdir)):
        raise VTUsageError(f"-o {outdir} already holds recordings this command did not make: give a new directory")
    clash = sorted(k for k in mine if k in there and there[k] != mine[k])
    if clash:
        raise VTUsageError(f"-o {outdir} holds {clash[0]} made with other options: run the same command to resume, or "
                           "give a new directory")
    with open(stamp, "w") as f:
        json.dump({**there, **mine}, f, sort_keys=True)


def _record_all(outdir: str, designs: list, plans: dict) -> dict:
    """{(design, phase): path} of every recording made (or kept from an earlier run)."""
    from valkeytrace.cli.launch import complete, run_launch

    out = {}
    for d in designs:
        for ph in PHASES:
            path = os.path.join(outdir, f"{d}-{ph}.vtrace")
            if os.path.exists(path) and not complete(path):
                raise VTUsageError(f"{path} is incomplete (an interrupted recording): remove it to record it again")
            if not os.path.exists(path):
                click.echo(f"recording {d} ({ph})", err=True)
                status, err, interrupted = run_launch(dataclasses.replace(plans[d][ph], output=path, notes=()))
                if interrupted:
                    click.echo(f"interrupted: the recordings made are kept in {outdir}; run the same command to resume",
                               err=True)
                    sys.exit(130)
                if status != 0:
                    click.echo(f"warning: {d} ({ph}) failed: {(err.strip().splitlines() or ['no output'])[-1]}",
                               err=True)
            if os.path.exists(path):
                out[(d, ph)] = path
    if not out:
        raise VTError("no design was measured")
    return out


def _table(outdir: str, designs: list, paths: dict) -> None:
    from valkeytrace.analysis.designs import design_row
    from valkeytrace.analysis.report import analyse
    from valkeytrace.recording import format as recfmt
    from valkeytrace.reporters.designs_table import TABLE

    def run(d, ph):
        p = paths.get((d, ph))
        return analyse([(p, recfmt.read(p))], with_whatif=False).runs[0] if p else None
    rows = [design_row(d, run(d, "shape"), run(d, "stall"), run(d, "cut")) for d in designs]
    for render, name in ((TABLE.markdown, "designs.md"), (TABLE.json, "designs.json")):
        with open(os.path.join(outdir, name), "w") as f:
            render(rows, f)
    TABLE.text(rows, sys.stdout)
