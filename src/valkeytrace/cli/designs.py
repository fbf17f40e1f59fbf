"""`valkeytrace compare --designs always,bio-write,bio-write-block,main-write -o DIR [record options]`: the designs
of valkey #3381's thread (2026-05-26) side by side. Each design is three recordings on fresh servers, one after
the other: the common options' matrix (the #4029 shape: GET from read-heavy, SET from write-only), a write-only
open loop under a disk that stalls 3 s in every 6 s and blocks writes during its sync (the memory the server
keeps, the clients' p99 during the stalls, main-write's postponements, bio-write-block's waits), and a power cut
(acknowledged writes lost). `always` is the stock server; the others the virtual offload (--emulate-offload
durable --offload-design D). It ends with one table, a row per design (analysis/designs.py,
reporters/designs_table.py), also written as DIR/designs.md and DIR/designs.json. A recording already in DIR
is kept (an interrupted run resumes where it stopped).
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
    paths = _record_all(outdir, designs, plans)
    _table(outdir, designs, paths)


def _record_all(outdir: str, designs: list, plans: dict) -> dict:
    """{(design, phase): path} of every recording made (or kept from an earlier run)."""
    from valkeytrace.cli.launch import run_launch

    out = {}
    for d in designs:
        for ph in PHASES:
            path = os.path.join(outdir, f"{d}-{ph}.vtrace")
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
