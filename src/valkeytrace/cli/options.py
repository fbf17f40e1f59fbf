"""The options `record` and `compare` share (both sides of a comparison get them), parsed into the
fields of plan.RecordOptions. A new recording option is a field of plan.RecordPlan, its check in
plan.py, and one click option here: both commands then take it."""
from __future__ import annotations

import os
import shutil

import click

from valkeytrace.tracers.factory import BACKENDS
from valkeytrace.workload.scenarios import SCENARIOS

# each scenario by name, and "all": every one that drives a load (the #4029 matrix)
WORKLOAD_CHOICES = {**{name: (name,) for name in SCENARIOS},
                    "all": tuple(name for name, sc in SCENARIOS.items() if sc.drives_load)}


MAX_VALUE_SIZE = 512 << 20  # valkey's default proto-max-bulk-len


def parse_sizes(ctx, param, value: str) -> tuple:
    sizes = []
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0:
            raise click.BadParameter(f"{part!r} is not a positive number of bytes (e.g. 64,256,1024)")
        if int(part) > MAX_VALUE_SIZE:
            raise click.BadParameter(f"{part} bytes: a value the server takes is at most 512 MB (proto-max-bulk-len), "
                                     "and the benchmark clients allocate one per client")
        sizes.append(int(part))
    if len(set(sizes)) != len(sizes):
        raise click.BadParameter("a size is listed twice")
    return tuple(sizes)


def parse_rates(spec: str) -> tuple:
    """'2000,20000' -> (2000.0, 20000.0), ascending, each > 0."""
    import math

    out = []
    for part in spec.split(","):
        try:
            v = float(part.strip())
        except ValueError:
            raise click.BadParameter(f"{part!r} is not a rate (requests per second, e.g. 2000,20000)") from None
        if not math.isfinite(v) or v <= 0:
            raise click.BadParameter(f"{part!r}: a rate is a number of requests per second above 0")
        out.append(v)
    if len(set(out)) != len(out):
        raise click.BadParameter("a rate is listed twice")
    return tuple(sorted(out))


def parse_server_config(ctx, param, values) -> dict:
    out = {}
    for item in values:
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        out[key.strip()] = val
    return out


def positive(ctx, param, value):
    import math

    if value is not None and (not math.isfinite(value) or value <= 0):
        raise click.BadParameter("must be a finite number greater than 0")
    return value


def existing_binary(ctx, param, value):
    if value is None:
        return None
    path = shutil.which(value) or value
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise click.BadParameter(f"{value} is not an executable file")
    return os.path.abspath(path)


COMMON = [
    click.option("--appendfsync", type=click.Choice(["always", "everysec", "no"]), default="always",
                 show_default=True, help="Embedded server only."),
    click.option("--io-threads", type=int, callback=positive, help="Embedded server only [default: min(8, CPUs)]."),
    click.option("--port", type=click.IntRange(1, 65535),
                 help="Embedded server only: its port [default: a free one]; --server-config port= is the same setting."),
    click.option("--replicas", type=click.IntRange(0, 4), default=0, show_default=True,
                 help="Embedded server only: launch N replicas of it on loopback (same binary and settings), "
                      "synced before the matrix and traced beside it; a side client times SET + WAITAOF."),
    click.option("--cluster", type=click.IntRange(0, 8), default=0, show_default=True,
                 help="Embedded server only: launch a Valkey cluster of N primaries (each with --replicas R) on loopback, "
                      "the slots spread evenly; the load goes by slot, each shard's latency apart (cells[].shards)."),
    click.option("--cluster-node-timeout", type=click.IntRange(100, 600000), default=15000, show_default=True,
                 metavar="MS", help="With --cluster: every node's cluster-node-timeout (how soon a failover starts)."),
    click.option("--server-config", multiple=True, callback=parse_server_config, metavar="KEY=VALUE",
                 help="Extra embedded-server config, repeatable (e.g. bio-aof-offload-enabled=yes)."),
    click.option("--workload", type=click.Choice(list(WORKLOAD_CHOICES)), default="all", show_default=True),
    click.option("--sizes", default="64,256,1024", callback=parse_sizes, show_default=True,
                 help="Value sizes in bytes, comma separated."),
    click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
                 help="Repeats per cell; tables show the median."),
    click.option("--duration", type=float, default=10.0, callback=positive, show_default=True,
                 help="Seconds per measured run."),
    click.option("--keyspace", type=click.IntRange(min=1), default=100000, show_default=True),
    click.option("--get-clients", type=click.IntRange(min=1), default=50, show_default=True),
    click.option("--set-clients", type=click.IntRange(min=1), default=8, show_default=True,
                 help="Background SET clients during read-heavy."),
    click.option("--write-clients", type=click.IntRange(min=1), default=50, show_default=True),
    click.option("--rate", type=float, callback=positive, metavar="R",
                 help="Open loop: the measured op's requests are due at R per second (--arrival), sent over as many "
                      "connections as a stall needs, their latency taken from the moment each was due (corrected "
                      "for coordinated omission); the time from the send is kept beside it. valkeytrace's own "
                      "client (csrc/vt_load.c) sends them."),
    click.option("--rates", "rates_spec", metavar="R1,R2,...",
                 help="Open loop at each of these rates, a cell each: the latency-throughput curve and where each "
                      "side saturates."),
    click.option("--connections", "pool", type=click.Choice(["clients", "grow"]), default="clients", show_default=True,
                 help="Open loop's connections. clients: the op's closed-loop count (--get-clients, --write-clients, "
                      "--set-clients), one request in flight on each, a request due while all of them wait held in "
                      "the client until one is answered (and counted late, its latency still from its due moment): "
                      "a population of clients, as wrk2 -c. grow: a pool that grows while every connection waits "
                      "(to 256), then pipelines: no request ever waits for another's reply."),
    click.option("--arrival", type=click.Choice(["poisson", "uniform"]), default="poisson", show_default=True,
                 help="How open-loop requests are spaced."),
    click.option("--set-rate", type=float, callback=positive, metavar="R",
                 help="Read-heavy: the background SETs open-loop at R per second too [default: closed loop, "
                      "--set-clients of them]."),
    click.option("--benchmark", "benchmark_path",
                 help="Benchmark client [default: valkey-benchmark, else redis-benchmark]."),
    click.option("--client-cpus", default="auto", show_default=True, metavar="auto|none|LIST",
                 help="CPUs the benchmark clients run on (e.g. 3 or 2-3). auto: CPUs of their own, apart "
                      "from the server's main and I/O threads (the last one or two; none on a 1-CPU host). "
                      "A server valkeytrace launches then gets the other CPUs when they are enough for its "
                      "threads; an attached one is never moved. none: wherever the kernel puts them."),
    click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                 help="Tracer: eBPF (root), the LD_PRELOAD shim (no privileges), both side by side, or none."),
    click.option("--block-threshold-us", type=float, default=100.0, callback=positive, show_default=True,
                 help="Main-thread off-CPU intervals at least this long go to the blocked timeline."),
    click.option("--inject-fsync-delay", "inject_spec", metavar="DURATION",
                 help="Emulate a slow disk: add DURATION (e.g. 4ms, or lognormal:4ms,0.3) after every "
                      "fsync/fdatasync, by sleeping; with ,stall:S/P (e.g. 2ms,stall:1s/2.5s) one of them S longer "
                      "in every P of wall time (a disk that stalls). Launched servers only; reports say so."),
    click.option("--inject-fsync-error", "fsync_error_spec", metavar="eio@N|enospc@N",
                 help="Emulate a failing disk: the Nth fsync/fdatasync the server makes fails with EIO (or ENOSPC), "
                      "nothing synced, as a disk's would (valkey under appendfsync always then exits). Launched "
                      "servers only."),
    click.option("--replica-get-clients", "replica_get_clients", type=click.IntRange(min=0), default=0, metavar="N",
                 help="With --replicas and --workload write-only: N readers on the first replica, each GET of the key the "
                      "writers sent last (the SETs then come from valkeytrace's own client, each value carrying its "
                      "sequence): ops.REPLICA_GET, and the reads checked against the primary's durability."),
    click.option("--replica-fsync-delay", "replica_delay_spec", metavar="DURATION|none",
                 help="With --replicas: the replicas' own emulated fsync delay (as --inject-fsync-delay; none: "
                      "no delay) [default: the primary's]."),
    click.option("--as-root", is_flag=True,
                 help="Under sudo, run a launched server as root (default: as the invoking user)."),
    click.option("--server-timeout", type=float, default=15.0, callback=positive, show_default=True,
                 help="Seconds to wait for a launched server to answer PING."),
    click.option("--aof-flush-probe", is_flag=True,
                 help="eBPF: also time flushAppendOnlyFile (two more uprobe hits per loop iteration)."),
    click.option("--loop-sample", is_flag=True,
                 help="eBPF: sample event-loop iteration durations (a beforeSleep uprobe, attached for a small "
                      "part of each second; its cost: docs/performance.md). Without it, only the count and mean (INFO)."),
    click.option("--socket-writes", is_flag=True,
                 help="Also time every socket write per thread (shim: in its wrapper; eBPF: the raw syscall "
                      "tracepoints, which every syscall on the host pays for; costs: docs/performance.md)."),
    click.option("--demand-pass/--no-demand-pass", default=True, show_default=True,
                 help="Before each traced read-heavy run, the GET-only passes the model calibrates on (predict, "
                      "the compare's what-if): about 2 s a run. Without them the model takes its CPU costs from "
                      "the windows' schedstat."),
    click.option("--measure-overhead", is_flag=True,
                 help="Before the matrix, run a short read-heavy cell untraced and traced, and store the ratio."),
]


def common_options(f):
    for opt in reversed(COMMON):
        f = opt(f)
    return f


def build_kwargs(common: dict) -> dict:
    """The COMMON options' values as plan.RecordOptions fields."""
    out = dict(common)
    out["workloads"] = WORKLOAD_CHOICES[out.pop("workload")]
    rate, spec = out.pop("rate", None), out.pop("rates_spec", None)
    if rate and spec:
        raise click.UsageError("give --rate R or --rates R1,R2,..., not both")
    try:
        out["rates"] = parse_rates(spec) if spec else ((rate,) if rate else ())
    except click.BadParameter as exc:
        raise click.UsageError(f"--rates {spec}: {exc.format_message()}") from None
    return out
