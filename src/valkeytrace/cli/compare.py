"""`valkeytrace compare [RECORD OPTIONS] --launches N -o DIR`: two sides in one command.

Most of the noise on a host like this one lies between server launches (docs/explain.md §1), so
the sides are launched N times each, alternating (ABBA: B C C B B C C B ...), each launch a fresh
server running the whole matrix: drift lands on both sides alike, and the report's significance
comes from the launch-to-launch spread (analysis/launches.py). The common options (record's,
cli/options.py) make one plan (valkeytrace.plan); each side's plan is that one with the side's own
options (RecordPlan.for_side); each launch is a `record` child running its side's plan (a fresh
process a launch, as two users' `record`s would be); the runs are gathered per side into
DIR/baseline.vtrace and DIR/candidate.vtrace, each run tagged with its launch. Ctrl-C keeps what
both sides measured.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Generic, TypeVar
import json
import os
import shutil
import signal
import sys
import time

import click
import msgspec

from valkeytrace import plan as planning
from valkeytrace import stopping
from valkeytrace.cli.launch import complete, run_launch
from valkeytrace.cli.options import build_kwargs, common_options, existing_binary, parse_server_config
from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.recording import document
from valkeytrace.recording import format as recfmt

SIDES = ("baseline", "candidate")
DESIGN_CHOICES = ["bio-write", "bio-write-block", "main-write"]  # record --offload-design's


def launch_order(n: int) -> list[tuple[str, int]]:
    """[(side, launch number)]: ABBA pairs, so that a linear drift weighs both sides alike and no
    side runs three times in a row."""
    out = []
    for i in range(n):
        pair = SIDES if i % 2 == 0 else SIDES[::-1]
        out += [(side, i + 1) for side in pair]
    return out


@click.command()
@click.option("--launches", type=click.IntRange(min=1), default=4, show_default=True,
              help="Server launches per side, alternating (ABBA); 3 or more give significance from the launches.")
@click.option("-o", "--output", "outdir", required=True, type=click.Path(file_okay=False),
              help="Directory for baseline.vtrace and candidate.vtrace (created; never overwritten).")
@click.option("--baseline-binary", type=click.Path(dir_okay=False), callback=existing_binary, help="The baseline's valkey-server binary.")
@click.option("--candidate-binary", type=click.Path(dir_okay=False), callback=existing_binary, help="The candidate's valkey-server binary.")
@click.option("--baseline-config", multiple=True, callback=parse_server_config, metavar="KEY=VALUE",
              help="Baseline server config, on top of --server-config (repeatable).")
@click.option("--candidate-config", multiple=True, callback=parse_server_config, metavar="KEY=VALUE",
              help="Candidate server config, on top of --server-config (repeatable).")
@click.option("--baseline-label", help="The baseline's name in reports.")
@click.option("--candidate-label", help="The candidate's name in reports.")
@click.option("--baseline-inject-fsync-delay", metavar="DURATION", help="The baseline's emulated fsync delay.")
@click.option("--candidate-inject-fsync-delay", metavar="DURATION", help="The candidate's emulated fsync delay.")
@click.option("--baseline-emulate-offload", type=click.Choice(["durable", "early-ack"]),
              help="The baseline as a virtual offload (record --emulate-offload).")
@click.option("--candidate-emulate-offload", type=click.Choice(["durable", "early-ack"]),
              help="The candidate as a virtual offload (emulated #3381; record --emulate-offload).")
@click.option("--dry-run", is_flag=True, help="Print both sides' plans and the estimated time, and exit.")
@click.option("--no-whatif", is_flag=True, help="The report without the what-if (report --no-whatif).")
@click.option("--baseline-offload-gather", metavar="DURATION", help="The baseline's --offload-gather (record).")
@click.option("--candidate-offload-gather", metavar="DURATION|auto",
              help="The candidate's --offload-gather (record); auto: the smallest window under which one job carries "
                   "every write client's write, as the pipeline model finds it from the first baseline launch "
                   "(valkeytrace predict --offload-gather auto).")
@click.option("--baseline-offload-replicas", type=click.Choice(["immediate", "committed", "replica-blocking"]),
              help="The baseline's stream to replicas under the durable offload (record --offload-replicas).")
@click.option("--candidate-offload-replicas", type=click.Choice(["immediate", "committed", "replica-blocking"]),
              help="The candidate's stream to replicas under the durable offload (record --offload-replicas).")
@click.option("--baseline-offload-design", type=click.Choice(DESIGN_CHOICES),
              help="The baseline's virtual offload design (record --offload-design).")
@click.option("--candidate-offload-design", type=click.Choice(DESIGN_CHOICES),
              help="The candidate's virtual offload design (record --offload-design).")
@click.option("--designs", "designs", metavar="LIST",
              help="Instead of two sides: each of these (always, bio-write, bio-write-block, main-write) recorded on "
                   "the common options, under a stalling disk that blocks writes and at a power cut, then one table, "
                   "a row per design (docs/explain.md). --launches and the per-side options do not apply.")
@click.option("--baseline-fsync-sensitivity", metavar="DELAYS",
              help="The intervention on the baseline only (record --fsync-sensitivity): each level's runs are "
                   "spread over the launches, 3 in all.")
@common_options
@click.pass_context
def compare(ctx, launches, outdir, baseline_binary, candidate_binary, baseline_config, candidate_config,
            baseline_label, candidate_label, baseline_inject_fsync_delay, candidate_inject_fsync_delay,
            baseline_emulate_offload, candidate_emulate_offload, dry_run, no_whatif, baseline_offload_gather,
            candidate_offload_gather, baseline_offload_replicas, candidate_offload_replicas, baseline_offload_design,
            candidate_offload_design, designs, baseline_fsync_sensitivity, **common):
    """Record a baseline and a candidate in alternating server launches, then compare them.

    The options below the per-side ones are `record`'s (--workload, --sizes, --repeat, --duration,
    --appendfsync, --io-threads, --server-config, --inject-fsync-delay, --backend, ...) and apply
    to both sides; a side's own option replaces (or, for config, adds to) the common one. Writes
    DIR/baseline.vtrace and DIR/candidate.vtrace and prints the compare report.
    """
    if designs:
        from valkeytrace.cli.designs import compare_designs, refuse_side_options

        refuse_side_options(ctx)
        compare_designs(designs, outdir, common, dry_run)
        return
    sides = Sides(SideOptions(baseline_binary, baseline_config, baseline_label, baseline_inject_fsync_delay,
                              baseline_emulate_offload, baseline_offload_gather, baseline_fsync_sensitivity,
                              baseline_offload_replicas, baseline_offload_design),
                  SideOptions(candidate_binary, candidate_config, candidate_label, candidate_inject_fsync_delay,
                              candidate_emulate_offload, candidate_offload_gather,
                              offload_replicas=candidate_offload_replicas, design=candidate_offload_design))
    auto_gather = (sides.candidate.offload_gather or "").strip().lower() == "auto"
    if auto_gather:
        sides.candidate = dataclasses.replace(sides.candidate, offload_gather=None)
        _check_auto_gather(sides.candidate.emulate_offload, sides.baseline.emulate_offload, common)
    plans = side_plans(common, sides, launches)
    from valkeytrace import estimate

    order = launch_order(launches)
    per = {side: estimate.estimate(plans[side].tracer.backend, plans[side].settings.matrix(),
                                   plans[side].settings.duration_s).per_launch_s for side in SIDES}
    if dry_run:
        _dry_run(plans, outdir, launches, sum(per[side] for side, _ in order))
        return
    parent = os.path.dirname(os.path.abspath(outdir))
    if not os.path.isdir(parent):
        raise VTUsageError(f"-o {outdir}: directory {parent} does not exist")
    work = os.path.join(outdir, ".launches")
    fingerprint = json.dumps({"launches": launches, "auto_gather": auto_gather,
                              **{s: json.loads(dataclasses.replace(plans[s], output=None, notes=()).as_json())
                                 for s in SIDES}}, sort_keys=True)
    resuming = _directory(outdir, work, fingerprint)
    if resuming is None:
        click.echo(f"{outdir} holds this comparison already, complete: its report", err=True)
        _report(ctx, tuple(os.path.join(outdir, f"{s}.vtrace") for s in SIDES), no_whatif)
        return
    written, interrupted = _run_launches(outdir, work, fingerprint, Launches(work, plans, order, per, resuming,
                                                                            auto_gather))
    if len(written) == 2:
        _report(ctx, tuple(written), no_whatif)
    if interrupted:
        sys.exit(130)
    if len(written) < 2:
        raise VTError("one side has no launch measured: nothing to compare")


def _run_launches(outdir: str, work: str, fingerprint: str, todo) -> tuple[list, bool]:
    """The launches, run (or resumed); (the side recordings written, whether interrupted)."""
    started = time.monotonic()
    done, interrupted = _launch_all(todo)
    written = _write_sides(outdir, done)
    if interrupted:
        click.echo(f"interrupted: the launches measured so far stay in {work}; the same command resumes", err=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
        if len(written) == 2:
            with open(os.path.join(outdir, ".compare.json"), "w") as f:
                f.write(fingerprint)
    click.echo(f"wrote {', '.join(written) or 'nothing'}: {len(done.baseline)} + {len(done.candidate)} launches "
               f"in {time.monotonic() - started:.0f} s", err=True)
    return written, interrupted


T = TypeVar("T")



@dataclass
class Sides(Generic[T]):
    """One thing per side of a comparison, by attribute or by the side's name."""
    baseline: T
    candidate: T

    def __getitem__(self, side: str) -> T:
        return self.baseline if side == "baseline" else self.candidate

    def __setitem__(self, side: str, value: T) -> None:
        setattr(self, "baseline" if side == "baseline" else "candidate", value)

    def items(self) -> list[tuple[str, T]]:
        return [("baseline", self.baseline), ("candidate", self.candidate)]


@dataclass(frozen=True)
class SideOptions:
    """One side's own options of a comparison (each replaces the common one; config adds to it)."""
    binary: str | None = None
    config: dict | None = None
    label: str | None = None
    inject_fsync_delay: str | None = None
    emulate_offload: str | None = None
    offload_gather: str | None = None
    fsync_sensitivity: str | None = None  # the baseline's only
    offload_replicas: str | None = None   # --offload-replicas of this side (None: the common one)
    design: str | None = None             # --offload-design of this side (None: bio-write)


def side_plans(common: dict, sides: Sides, launches: int) -> Sides:
    """{side: RecordPlan}: the common options' plan, each side's own options applied."""
    from valkeytrace.tracers.emulation import parse_fsync_delay, parse_gather, parse_sensitivity

    common_plan = planning.build(planning.RecordOptions(**build_kwargs(common)))
    for note in common_plan.notes:
        click.echo(f"note: {note}", err=True)
    plans: Sides = Sides(common_plan, common_plan)
    for side, o in sides.items():
        plans[side] = common_plan.for_side(
            binary=o.binary, config=o.config, label=o.label,
            fsync_delay=parse_fsync_delay(o.inject_fsync_delay) if o.inject_fsync_delay else None,
            offload=o.emulate_offload, gather_ns=parse_gather(o.offload_gather) if o.offload_gather else None,
            offload_replicas=o.offload_replicas).with_design(o.design)
        if o.fsync_sensitivity:
            plans[side] = plans[side].for_side(sensitivity_ns=parse_sensitivity(o.fsync_sensitivity),
                                               sensitivity_runs=-(-3 // launches))
    return plans


def _dry_run(plans: Sides, outdir: str, launches: int, total_s: float) -> None:
    from valkeytrace import estimate
    from valkeytrace.cli.record import describe_plan

    for side in SIDES:
        click.echo(f"{side}:")
        for line in describe_plan(dataclasses.replace(plans[side], output=os.path.join(outdir, f"{side}.vtrace")),
                                  launches)[:-1]:
            click.echo(f"  {line}")
    est = estimate.Estimate(total_s, total_s / max(1, 2 * launches), 2 * launches,
                            sum(len(plans[s].settings.matrix()) for s in SIDES) * launches,
                            all(estimate.estimate(plans[s].tracer.backend, plans[s].settings.matrix(), 1).measured
                                for s in SIDES))
    click.echo(f"estimated: {estimate.describe(est)}")


def _report(ctx, paths: tuple, no_whatif: bool = False) -> None:
    from valkeytrace.cli.report import report

    ctx.invoke(report, compare_paths=paths, recordings=(), fmt=None, output=None, plot_dir=None, labels=None,
               detail=False, no_whatif=no_whatif)


def _directory(outdir: str, work: str, fingerprint: str) -> bool | None:
    """Whether the launches resume an interrupted comparison in outdir (False: a new one); None when outdir
    holds this comparison complete. Refuses a directory that holds another."""
    state = os.path.join(work, "compare.json")
    finished = os.path.join(outdir, ".compare.json")  # the options of the comparison the directory holds
    sides_there = all(os.path.exists(os.path.join(outdir, f"{s}.vtrace")) for s in SIDES)
    if sides_there and not os.path.exists(state) and os.path.exists(finished):
        with open(finished) as f:
            same = f.read() == fingerprint
        if not same:
            raise VTUsageError(f"-o {outdir} already holds a comparison made with other options: give a new directory")
        return None
    resuming = os.path.exists(state)
    if resuming:
        with open(state) as f:
            if f.read() != fingerprint:
                raise VTUsageError(f"-o {outdir} holds an interrupted comparison made with other options: run the same "
                                   "command to resume it, or give a new directory")
    elif any(os.path.exists(os.path.join(outdir, f"{s}.vtrace")) for s in SIDES):
        raise VTUsageError(f"-o {outdir} already holds a comparison: give a new directory")
    os.makedirs(work, exist_ok=True)
    with open(state, "w") as f:
        f.write(fingerprint)
    return resuming


@dataclass
class Launches:
    """The launches of a comparison: where they go, each side's plan, their order, each side's
    estimated seconds a launch (updated as they run)."""
    work: str
    plans: Sides
    order: list
    per: dict
    resuming: bool
    auto_gather: bool


def _launch_all(ls: Launches) -> tuple[Sides, bool]:
    """Run the launches in order under a progress bar: (each side's [(k, path)] measured, interrupted)."""
    from rich.console import Console

    done: Sides[list[tuple[int, str]]] = Sides([], [])
    console = Console(stderr=True)

    old_term = signal.signal(signal.SIGTERM, stopping.on_signal)  # as Ctrl-C: stop cleanly, keep what was measured
    try:
        return _launch_loop(ls, done, console)
    except KeyboardInterrupt:
        return done, True
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _launch_loop(ls: Launches, done: Sides, console) -> tuple[Sides, bool]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    order, per, plans = ls.order, ls.per, ls.plans
    total_s = sum(per[side] for side, _ in order)
    interrupted = False
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[launch]}"),
                  TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"), console=console,
                  auto_refresh=console.is_terminal, refresh_per_second=1) as progress:
        task = progress.add_task("launching", total=total_s, launch=f"0/{len(order)}", eta=_clock(total_s))
        left = total_s
        for i, (side, k) in enumerate(order):
            path = os.path.join(ls.work, f"{side}-{k}.vtrace")
            if ls.resuming and complete(path):
                done[side].append((k, path))
                left -= per[side]
                continue
            if os.path.exists(path):
                os.unlink(path)  # a launch cut short: measured again, whole
            if side == "candidate" and ls.auto_gather and not plans.candidate.emulation.gather_ns:
                plans.candidate = _resolve_gather(ls.work, plans.candidate, done.baseline)
            t0 = time.monotonic()

            def tick():
                el = time.monotonic() - t0
                progress.update(task, completed=total_s - left + min(el, per[side]), launch=f"{i + 1}/{len(order)}",
                                eta=_clock(max(0.0, left - el)), description=f"{side} launch {k}")
            tick()
            status, err, interrupted = run_launch(dataclasses.replace(plans[side], output=path, notes=()), tick)
            per[side] = 0.5 * per[side] + 0.5 * (time.monotonic() - t0)  # this host's, for the launches to come
            left = sum(per[s] for s, _ in order[i + 1:])
            interrupted = interrupted or stopping.requested.is_set()  # a signal whose exception a fork handler dropped
            if complete(path) or (os.path.exists(path) and not interrupted):
                done[side].append((k, path))
            if interrupted:
                break
            if status != 0:
                _launch_failed(ls.work, side, k, err, done)
        progress.update(task, completed=total_s if not interrupted else progress.tasks[0].completed, eta=_clock(0))
    return done, interrupted


def _launch_failed(work: str, side: str, k: int, err: str, done: Sides) -> None:
    """A failed launch: the comparison's end when nothing was measured yet, else a warning."""
    last = (err.strip().splitlines() or ["no output"])[-1]
    if not done.baseline and not done.candidate:
        shutil.rmtree(work, ignore_errors=True)
        raise VTError(f"{side} launch {k} failed: {last.removeprefix('valkeytrace: error: ')}")
    click.echo(f"warning: {side} launch {k} failed: {last}", err=True)


def _write_sides(outdir: str, done: Sides) -> list[str]:
    """Each side's launches merged into outdir/SIDE.vtrace (a side with a measured run); the paths written."""
    written = []
    docs = Sides(*(document.merge_launches([(k, recfmt.read(p)) for k, p in sorted(done[s]) if os.path.exists(p)], s)
                   for s in SIDES))
    base, cand = docs.baseline, docs.candidate
    if base is not None and cand is not None:
        names = Sides(*(document.label_of(d) for d in (base, cand)))
        if names.baseline == names.candidate:
            for s, d in (("baseline", base), ("candidate", cand)):
                d["label"] = f"{names[s]} ({s})"
    for s, merged in docs.items():
        if merged is not None and any(r.status == "ok" for r in document.outcomes(merged)):
            path = os.path.join(outdir, f"{s}.vtrace")
            recfmt.write(path, merged)
            written.append(path)
    return written


def _check_auto_gather(cand_offload, base_offload, common: dict) -> None:
    from valkeytrace.cli.options import WORKLOAD_CHOICES

    if cand_offload != "durable":
        raise VTUsageError("--candidate-offload-gather auto chooses the durable offload's window: add "
                           "--candidate-emulate-offload durable")
    if base_offload:
        raise VTUsageError("--candidate-offload-gather auto reads the window off a baseline whose main thread "
                           "fsyncs (appendfsync always): drop --baseline-emulate-offload")
    if "write-only" not in WORKLOAD_CHOICES[common["workload"]]:
        raise VTUsageError("--candidate-offload-gather auto chooses the window on the write-only cell: use "
                           "--workload write-only or all")


def _resolve_gather(work: str, plan, baseline_launches: list):
    """The candidate's gather window from the first baseline launch (kept in the work directory, so that
    a resumed compare uses the same one): the model's smallest one-cohort window."""
    from valkeytrace.analysis.calibration import CalibrationError, calibrate
    from valkeytrace.analysis.predict import Change, one_cohort_window

    kept = os.path.join(work, "auto-gather.json")
    got = None
    try:
        with open(kept, "rb") as f:
            got = msgspec.json.decode(f.read(), type=AutoGather)
    except (OSError, msgspec.DecodeError):
        pass  # none yet (or an older compare's cut short): chosen again from the first baseline launch
    if got is None:
        if not baseline_launches:
            raise VTError("--candidate-offload-gather auto: no baseline launch measured to choose the window from")
        k, path = sorted(baseline_launches)[0]
        size = plan.settings.sizes[0]
        try:
            found = one_cohort_window(calibrate(recfmt.read(path), "write-only", size), Change(offload="durable"))
        except CalibrationError as exc:
            raise VTError(f"--candidate-offload-gather auto: {exc}") from None
        if found["gather_us"] is None:
            raise VTError("--candidate-offload-gather auto: no window the model tried gives one cohort")
        got = AutoGather(int(found["gather_us"] * 1000), k, size, found["clients"])
        tmp = kept + ".partial"  # whole or not at all: a resume reads it
        with open(tmp, "wb") as f:
            f.write(msgspec.json.encode(got))
        os.replace(tmp, kept)
    source = (f"the pipeline model's smallest one-cohort window for {got.clients} write clients, from baseline "
              f"launch {got.launch}'s write-only {got.size} B cell (compare --candidate-offload-gather auto)")
    click.echo(f"note: --candidate-offload-gather auto: {got.gather_ns / 1e6:g} ms, {source}", err=True)
    return plan.for_side(gather_ns=got.gather_ns, gather_source=source)


class AutoGather(msgspec.Struct):
    """The window compare --candidate-offload-gather auto chose, kept in the work directory for a resume."""
    gather_ns: int
    launch: int
    size: int
    clients: int


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}"
