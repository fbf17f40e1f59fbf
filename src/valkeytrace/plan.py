"""One typed plan for a recording: what to launch, the matrix, the tracer, the emulation.

`record` builds a RecordPlan from its options, `compare` builds one per side from the common
options and the side's own (RecordPlan.for_side), and the session (valkeytrace.session) runs a
plan. Every check an option needs (usage errors, before any server starts) is made here, once:
a new option is a field here, its check in build(), and a click option in cli/options.py.

A plan is JSON-able (as_json/from_json): `compare` hands each launch's plan to a `record` child
(a fresh process a launch, as a user's two `record`s would be).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from valkeytrace.errors import VTUsageError
from valkeytrace.recorder import Settings

EMBEDDED_ONLY = ("appendfsync", "io_threads", "server_config", "server_binary", "port", "replicas", "cluster")


@dataclass(frozen=True)
class ServerPlan:
    """What to run the workloads against: the embedded server (or another binary under its
    settings), a SERVER_COMMAND, or a running server (--attach)."""
    appendfsync: str = "always"
    io_threads: int | None = None
    config: dict = field(default_factory=dict)
    binary: str | None = None          # --server-binary: another build, the embedded server's settings
    command: tuple = ()                # -- SERVER_COMMAND ...
    attach_pid: int | None = None
    port: int | None = None            # the embedded server's port (--port or --server-config port=); None: a free one
    as_root: bool = False
    timeout_s: float = 15.0
    replicas: int = 0                  # --replicas N: replicas of the embedded server, launched and traced
    cluster: int = 0                   # --cluster N: N primaries (each with `replicas` replicas), cluster-enabled
    cluster_node_timeout_ms: int = 15000  # --cluster-node-timeout
    failover: str = ""                 # --failover SHARD@T: that shard's primary killed T s into the window
    cluster_seed: str = ""             # --cluster-seed HOST:PORT: a running cluster (attach_pid: its node traced first)

    @property
    def launched(self) -> bool:
        return self.attach_pid is None


@dataclass(frozen=True)
class TracerPlan:
    backend: str = "auto"              # resolved by build(): ebpf, shim, both or none
    block_threshold_us: float = 100.0
    aof_flush_probe: bool = False
    loop_sample: bool = False
    socket_writes: bool = False


@dataclass(frozen=True)
class EmulationPlan:
    fsync_delay: dict | None = None    # tracers.emulation.parse_fsync_delay's
    offload: str | None = None         # durable, early-ack
    gather_ns: int = 0                 # --offload-gather: a job starts this long after its first write
    gather_source: str | None = None   # how the window was chosen (compare --candidate-offload-gather auto)
    fsync_error: str | None = None     # --inject-fsync-error: "eio@N" (the Nth fsync fails)
    replica_fsync_delay: dict | None = None  # --replica-fsync-delay: the replicas' ({}: none); None: the primary's
    max_pending: int = 0               # --offload-max-pending: replies held + commands pending before the overflow
    overflow: str = "none"             # --offload-overflow: pause (stop reading clients) or reject (error to writes)
    offload_replicas: str = "immediate"  # --offload-replicas: the stream to replicas at once, or held until durable
    design: str = "bio-write"          # --offload-design: how the offload hands off and runs its jobs (#3381's options)

    @property
    def replicas_delay(self) -> dict | None:
        """The fsync delay the replicas' shim injects."""
        return self.fsync_delay if self.replica_fsync_delay is None else (self.replica_fsync_delay or None)
    # --fsync-sensitivity's levels are the matrix's (Settings.sensitivity): one copy


@dataclass(frozen=True)
class RecordPlan:
    server: ServerPlan
    settings: Settings
    tracer: TracerPlan
    emulation: EmulationPlan
    benchmark_path: str | None = None
    client_cpus: str = "auto"
    label: str | None = None
    output: str | None = None
    measure_overhead: bool = False
    verify_durability: str = ""        # --verify-durability kill|power-cut: the server killed after the last window, its
    #                                    AOF reloaded as it stands (kill) or as a power cut leaves it (workload/powercut.py)
    torn: bool = False                 # --torn: power-cut states with torn tails too
    notes: tuple = ()                  # for the user, e.g. what --backend auto chose

    @property
    def sensitivity_ns(self) -> tuple:
        return self.settings.sensitivity

    def for_side(self, *, binary=None, config=None, label=None, fsync_delay=None, offload=None, gather_ns=None,
                 sensitivity_ns=None, sensitivity_runs=None, gather_source=None,
                 offload_replicas=None) -> "RecordPlan":
        """This plan for one side of a comparison: its binary, extra config (on top of the common
        one), label and emulation; None leaves the common value."""
        server = dataclasses.replace(self.server, binary=binary or self.server.binary,
                                     config={**self.server.config, **(config or {})})
        emulation = dataclasses.replace(self.emulation,
                                        fsync_delay=fsync_delay if fsync_delay is not None else self.emulation.fsync_delay,
                                        offload=offload or self.emulation.offload,
                                        gather_ns=gather_ns if gather_ns is not None else self.emulation.gather_ns,
                                        gather_source=gather_source or self.emulation.gather_source,
                                        offload_replicas=offload_replicas or self.emulation.offload_replicas)
        settings = dataclasses.replace(self.settings,
                                       sensitivity=tuple(sensitivity_ns) if sensitivity_ns else self.settings.sensitivity,
                                       sensitivity_runs=sensitivity_runs or self.settings.sensitivity_runs)
        plan = dataclasses.replace(self, server=server, emulation=emulation, settings=settings,
                                   label=label or self.label)
        plan.check()
        return plan

    def with_design(self, design: str | None) -> "RecordPlan":
        """This plan with the virtual offload's --offload-design (None: as it is)."""
        if not design:
            return self
        plan = dataclasses.replace(self, emulation=dataclasses.replace(self.emulation, design=design))
        plan.check()
        return plan

    def check(self) -> None:
        """The usage errors a combination of fields makes (one line each, before anything starts)."""
        self.check_target()
        t = self.tracer
        ebpf_only = [flag for flag, on in (("--aof-flush-probe", t.aof_flush_probe), ("--loop-sample", t.loop_sample)) if on]
        if ebpf_only and t.backend not in ("ebpf", "both"):
            raise VTUsageError(f"{', '.join(ebpf_only)} needs the eBPF backend (this run's backend is {t.backend})")
        if t.socket_writes and t.backend == "none":
            raise VTUsageError("--socket-writes needs a tracer: --backend ebpf, shim or both")
        if self.sensitivity_ns and t.backend == "none":
            raise VTUsageError("--fsync-sensitivity needs a tracer to measure the fsync time it moves: "
                               "--backend ebpf, shim or both")

    def check_target(self) -> None:
        """What the server and the emulation allow, whatever tracer the host offers."""
        from valkeytrace.tracers import offload as voff
        from valkeytrace.workload.scenarios import SCENARIOS

        s, e = self.server, self.emulation
        if s.command and s.attach_pid:
            raise VTUsageError("give either a SERVER_COMMAND or --attach PID, not both")
        if e.fsync_delay and not s.launched:
            raise VTUsageError("--inject-fsync-delay needs a server valkeytrace launches (it preloads "
                               "the shim); it cannot apply to --attach")
        if e.fsync_error and not s.launched:
            raise VTUsageError("--inject-fsync-error needs a server valkeytrace launches (it preloads "
                               "the shim); it cannot apply to --attach")
        voff.check_usage(e.offload, s.appendfsync, not s.launched, bool(s.command))
        if e.design != voff.DESIGNS[0] and e.offload in (None, "ack-after-write"):
            raise VTUsageError(f"--offload-design {e.design} shapes the virtual offload: it needs --emulate-offload "
                               "durable or early-ack (ack-after-write is a fault of bio-write's jobs)")
        if e.gather_ns and e.offload != "durable":
            raise VTUsageError("--offload-gather shapes the durable virtual offload's jobs: it needs "
                               "--emulate-offload durable")
        if (e.max_pending or e.overflow != "none") and (e.offload != "durable" or not e.max_pending
                                                        or e.overflow == "none"):
            raise VTUsageError("--offload-max-pending N and --offload-overflow pause|reject bound the durable virtual "
                               "offload: give both, with --emulate-offload durable")
        if self.verify_durability:
            self._check_verify()
        if self.verify_durability == "power-cut" and self.tracer.backend == "none":
            raise VTUsageError("--verify-durability power-cut reads the server's syncs from its trace: it needs "
                               "--backend ebpf, shim or both")
        if self.torn and self.verify_durability != "power-cut":
            raise VTUsageError("--torn shapes the states of --verify-durability power-cut: give both")
        if self.sensitivity_ns and not s.launched:
            raise VTUsageError("--fsync-sensitivity needs a server valkeytrace launches (it preloads "
                               "the shim to add the delay); it cannot apply to --attach")
        if self.sensitivity_ns and not any(SCENARIOS[w].drives_load for w in self.settings.workloads):
            raise VTUsageError("--fsync-sensitivity needs a workload: with --workload none there is no "
                               "client latency to relate to the fsync time")
        if s.attach_pid:  # options that contradict --attach are refused first: they need no process
            check_attach_pid(s.attach_pid)

    def _check_verify(self) -> None:
        st = self.settings
        if not self.server.launched:
            raise VTUsageError("--verify-durability kills the server after the last window: it needs a server "
                               "valkeytrace launches, not --attach")
        if tuple(st.workloads) != ("write-only",):
            raise VTUsageError("--verify-durability checks valkeytrace's own client's acknowledged SETs (each value "
                               "carries its sequence): it needs --workload write-only")
        if min(st.sizes) < 16:
            raise VTUsageError("--verify-durability writes a 16-digit sequence into each value: it needs --sizes of "
                               "16 B or more")

    def as_json(self) -> str:
        d = dataclasses.asdict(self)
        d["settings"] = dataclasses.asdict(self.settings)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "RecordPlan":
        """The plan as_json wrote, decoded into its dataclasses by their declared types."""
        import msgspec

        return msgspec.json.decode(text.encode(), type=cls, strict=False)


def _settle_config(config: dict, appendfsync: str, io_threads, port, given) -> tuple:
    """One source of truth for what both an option and --server-config can set: a setting given
    both ways must agree (one line otherwise); given only in the config, it is the option's value.
    The config keeps none of them (the option is what the server is launched with)."""
    config.pop("", None)
    for key in list(config):
        if key.lower() != key or key.startswith("-"):
            config[key.lower().lstrip("-")] = config.pop(key)
    for key, opt, value, cast in (("appendfsync", "appendfsync", appendfsync, str),
                                  ("io-threads", "io_threads", io_threads, int), ("port", "port", port, int)):
        if key not in config:
            continue
        raw = config.pop(key)
        try:
            v = cast(raw)
        except ValueError:
            raise VTUsageError(f"--server-config {key}={raw}: not a valid {key}") from None
        if (opt in given or (value is not None and opt != "appendfsync")) and value is not None and v != value:
            raise VTUsageError(f"--{opt.replace('_', '-')} {value} and --server-config {key}={raw} contradict "
                               "each other: give one")
        if key == "appendfsync":
            appendfsync = str(v)
        elif key == "io-threads":
            io_threads = v
        else:
            port = v
    if str(config.get("daemonize", "no")).lower() in ("yes", "1", "true"):
        raise VTUsageError("--server-config daemonize=yes: valkeytrace runs the server in the foreground to "
                           "measure and stop it; leave daemonize off")
    if port is not None and not 0 < port < 65536:
        raise VTUsageError(f"port {port}: expected 1-65535")
    return appendfsync, io_threads, port


def _refuse_daemonize(argv: list) -> None:
    """A SERVER_COMMAND that daemonizes would leave its server behind the process valkeytrace
    watches: refused in one line before anything runs."""
    for i, a in enumerate(argv):
        if a.lstrip("-").lower() == "daemonize" and i + 1 < len(argv) and argv[i + 1].lower() in ("yes", "1", "true"):
            raise VTUsageError("the server command daemonizes (--daemonize yes): valkeytrace runs it in the "
                               "foreground to measure and stop it; drop --daemonize yes")


def _check_memory(sizes, keyspace: int, *clients: int) -> None:
    """The keyspace of the largest value size (the read-heavy fill, and as much AOF), and a value a
    client for each connection, must fit in this host's available memory: refused before launch."""
    import psutil

    need = max(sizes) * (keyspace + sum(clients))
    avail = psutil.virtual_memory().available
    if need > avail // 2:
        raise VTUsageError(f"--sizes {max(sizes)} x --keyspace {keyspace}: the keyspace alone would take "
                           f"{need / 2**30:.1f} GiB, more than half of the {avail / 2**30:.1f} GiB this host has free; "
                           "use a smaller --keyspace or value size")


def check_attach_pid(pid: int) -> None:
    """--attach PID names a live valkey or redis server (one line otherwise, before anything starts)."""
    import psutil

    if pid <= 0:
        raise VTUsageError(f"--attach {pid}: a process id is a positive number")
    try:
        proc = psutil.Process(pid)
        name, cmd = proc.name(), " ".join(proc.cmdline()[:1])
    except psutil.NoSuchProcess:
        raise VTUsageError(f"--attach {pid}: no such process") from None
    except psutil.AccessDenied:
        raise VTUsageError(f"--attach {pid}: permission denied (run as its owner or root)") from None
    if proc.status() == psutil.STATUS_ZOMBIE:
        raise VTUsageError(f"--attach {pid}: the process has exited")
    if not any(w in (name + " " + cmd).lower() for w in ("valkey", "redis")):
        raise VTUsageError(f"--attach {pid}: {name!r} is not a valkey or redis server")


@dataclass(frozen=True)
class RecordOptions:
    """record's options (parsed values), one typed value: what build() makes a plan of. embedded_only_given:
    the EMBEDDED_ONLY options the user gave (refused with a SERVER_COMMAND or --attach)."""
    server_command: tuple = ()
    attach_pid: int | None = None
    appendfsync: str = "always"
    io_threads: int | None = None
    server_binary: str | None = None
    server_config: dict | None = None
    workloads: tuple = ()
    sizes: tuple = (64,)
    repeat: int = 3
    duration: float = 10.0
    keyspace: int = 100000
    get_clients: int = 50
    set_clients: int = 8
    write_clients: int = 50
    benchmark_path: str | None = None
    client_cpus: str = "auto"
    backend: str = "auto"
    label: str | None = None
    output: str | None = None
    block_threshold_us: float = 100.0
    inject_spec: str | None = None
    as_root: bool = False
    server_timeout: float = 15.0
    aof_flush_probe: bool = False
    loop_sample: bool = False
    socket_writes: bool = False
    offload_mode: str | None = None
    offload_gather: str | None = None
    sensitivity_spec: str | None = None
    force: bool = False
    port: int | None = None
    sensitivity_runs: int = 3
    measure_overhead: bool = False
    demand_pass: bool = True
    embedded_only_given: tuple | list = ()
    replicas: int = 0
    replica_delay_spec: str | None = None
    replica_get_clients: int = 0
    fsync_error_spec: str | None = None
    rates: tuple = ()
    arrival: str = "poisson"
    set_rate: float | None = None
    pool: str = "clients"
    offload_max_pending: int = 0
    offload_overflow: str = "none"
    offload_replicas: str = "immediate"
    offload_design: str = "bio-write"
    verify_durability: str = ""
    torn: bool = False
    cluster: int = 0
    cluster_node_timeout: int = 15000
    failover: str | None = None
    cluster_seed: str | None = None


def _seed_pid(o: RecordOptions) -> int:
    """--cluster-seed: the pid of the first primary (in slot order) that runs on this host, the recording's server."""
    from valkeytrace.server.cluster import discover

    if o.cluster or o.attach_pid or o.server_command or o.failover:
        raise VTUsageError("--cluster-seed records a running cluster: not with --cluster, --attach, a SERVER_COMMAND "
                           "or --failover")
    assert o.cluster_seed is not None
    _, shards = discover(o.cluster_seed)
    pid = next((pid for nodes in shards for _, _, role, pid in nodes if pid and role == "primary"), None)
    if pid is None:
        raise VTUsageError(f"--cluster-seed {o.cluster_seed}: no primary of the cluster runs on this host (valkeytrace "
                           "traces the nodes here)")
    return pid


def parse_failover(spec: str, shards: int) -> tuple[int, float]:
    """--failover SHARD@T: (shard, seconds into the window); VTUsageError when it does not parse or fit."""
    shard, _, at = spec.partition("@")
    try:
        out = (int(shard), float(at))
    except ValueError:
        raise VTUsageError(f"--failover {spec!r}: expected SHARD@SECONDS, e.g. 0@2") from None
    if not 0 <= out[0] < shards or out[1] < 0:
        raise VTUsageError(f"--failover {spec}: the shard must be 0 to {shards - 1} (--cluster {shards}), T at least 0")
    return out


def _check_failover_window(o: RecordOptions) -> None:
    """--failover kills once: one measured SET window (a second would find the shard failed over already), T inside
    it, and a majority of primaries left to elect the replica."""
    if o.repeat != 1 or len(o.sizes) != 1 or len(o.rates) != 1:
        raise VTUsageError("--failover kills the primary once, in one measured window: give --repeat 1, one --sizes "
                           "and one --rate")
    if parse_failover(o.failover or "", o.cluster)[1] >= o.duration:
        raise VTUsageError(f"--failover {o.failover}: T must fall inside the window (under --duration {o.duration:g})")
    if o.cluster < 3:
        raise VTUsageError(f"--failover needs a majority of primaries alive to promote a replica: give --cluster 3 "
                           f"or more (not {o.cluster})")


def _check_cluster(o: RecordOptions) -> None:
    if o.failover and not o.cluster:
        raise VTUsageError("--failover kills a shard's primary: it needs --cluster N")
    if o.failover:
        parse_failover(o.failover, o.cluster)
        if not o.replicas:
            raise VTUsageError("--failover promotes a replica: it needs --replicas 1 or more")
        if tuple(o.workloads) != ("write-only",) or not o.rates:
            raise VTUsageError("--failover runs in the open-loop write-only window: give --workload write-only --rate R")
        _check_failover_window(o)
    if o.cluster and (o.verify_durability or o.replica_get_clients or o.set_rate or o.sensitivity_spec):
        raise VTUsageError("--cluster does not combine with --verify-durability, --replica-get-clients, --set-rate "
                           "or --fsync-sensitivity yet")


def _check_load_options(o: RecordOptions) -> None:
    """The options that shape the load and the replicas, against each other (VTUsageError)."""
    _check_cluster(o)
    if o.replica_get_clients and (not o.replicas or "write-only" not in o.workloads):
        raise VTUsageError("--replica-get-clients reads from a replica while the writers write: it needs --replicas N "
                           "and --workload write-only (or all)")
    if o.replica_get_clients and min(o.sizes) < 16:
        raise VTUsageError("--replica-get-clients reads each value's 16-digit sequence: it needs --sizes of 16 B or more")
    if o.replica_delay_spec is not None and not o.replicas:
        raise VTUsageError("--replica-fsync-delay sets the replicas' fsync delay: it needs --replicas N")
    if (o.rates or o.set_rate) and not any(w in ("read-heavy", "write-only") for w in o.workloads):
        raise VTUsageError("--rate/--rates/--set-rate drive a load open-loop: they need --workload read-heavy, "
                           "write-only or all")
    if o.set_rate and "read-heavy" not in o.workloads:
        raise VTUsageError("--set-rate paces read-heavy's background SETs: it needs --workload read-heavy or all")


def build(o: RecordOptions) -> RecordPlan:
    """The plan from record's options. Raises VTUsageError."""
    from valkeytrace.recording.format import check_recording_output
    from valkeytrace.tracers.emulation import parse_fsync_delay, parse_fsync_error, parse_gather, parse_sensitivity
    from valkeytrace.tracers.factory import resolve_backend
    from valkeytrace.workload import placement

    if o.cluster_seed:
        o = dataclasses.replace(o, attach_pid=_seed_pid(o))
    if (o.server_command or o.attach_pid) and o.embedded_only_given:
        given = ", ".join(f"--{p.replace('_', '-')}" for p in o.embedded_only_given)
        raise VTUsageError(f"{given} only shape the embedded server; with a SERVER_COMMAND or --attach, "
                           "configure the server itself")
    if o.output:
        check_recording_output(o.output, o.force)
    if o.workloads and any(w != "none" for w in o.workloads):
        _check_memory(o.sizes, o.keyspace, o.write_clients, o.get_clients, o.set_clients)
        if o.benchmark_path:
            from valkeytrace.workload.clients import find_client

            find_client(o.benchmark_path)  # a missing client is refused before any server starts
    if o.client_cpus not in ("auto", "none"):
        placement.choose(o.client_cpus, None, 1)  # a bad list is a usage error before any server starts
    config = dict(o.server_config or {})
    appendfsync, io_threads, port = _settle_config(config, o.appendfsync, o.io_threads, o.port, o.embedded_only_given)
    if o.server_command:
        _refuse_daemonize(list(o.server_command))
    server = ServerPlan(appendfsync=appendfsync, io_threads=io_threads, config=config, port=port,
                        binary=o.server_binary, command=tuple(o.server_command), attach_pid=o.attach_pid,
                        as_root=o.as_root, timeout_s=o.server_timeout, replicas=o.replicas, cluster=o.cluster,
                        cluster_node_timeout_ms=o.cluster_node_timeout, failover=o.failover or "",
                        cluster_seed=o.cluster_seed or "")
    _check_load_options(o)
    replica_delay = None if o.replica_delay_spec is None else (
        {} if o.replica_delay_spec.strip().lower() in ("none", "0") else parse_fsync_delay(o.replica_delay_spec))
    emulation = EmulationPlan(fsync_delay=parse_fsync_delay(o.inject_spec) if o.inject_spec else None, offload=o.offload_mode,
                              gather_ns=parse_gather(o.offload_gather) if o.offload_gather else 0,
                              replica_fsync_delay=replica_delay, max_pending=o.offload_max_pending,
                              overflow=o.offload_overflow, offload_replicas=o.offload_replicas, design=o.offload_design,
                              fsync_error=parse_fsync_error(o.fsync_error_spec) if o.fsync_error_spec else None)
    settings = Settings(workloads=tuple(o.workloads), sizes=tuple(o.sizes), repeat=o.repeat, duration_s=o.duration,
                        keyspace=o.keyspace, get_clients=o.get_clients, set_clients=o.set_clients,
                        write_clients=o.write_clients, backend=o.backend,
                        sensitivity=tuple(parse_sensitivity(o.sensitivity_spec)) if o.sensitivity_spec else (),
                        sensitivity_runs=o.sensitivity_runs, rates=tuple(o.rates), arrival=o.arrival, set_rate=o.set_rate,
                        pool=o.pool, demand_pass=o.demand_pass, replica_get_clients=o.replica_get_clients)
    plan = RecordPlan(server, settings, TracerPlan(o.backend), emulation, benchmark_path=o.benchmark_path,
                      client_cpus=o.client_cpus, label=o.label, output=o.output, measure_overhead=o.measure_overhead,
                      verify_durability=o.verify_durability, torn=o.torn)
    plan.check_target()  # usage errors whatever tracer the host offers, before asking it
    backend, note = resolve_backend(o.backend, attached=o.attach_pid is not None)
    plan = dataclasses.replace(plan, settings=dataclasses.replace(settings, backend=backend),
                               tracer=TracerPlan(backend=backend, block_threshold_us=o.block_threshold_us,
                                                 aof_flush_probe=o.aof_flush_probe, loop_sample=o.loop_sample,
                                                 socket_writes=o.socket_writes),
                               notes=(note,) if note else ())
    plan.check()
    return plan
