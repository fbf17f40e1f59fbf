"""The recording's declared model: every key a report, plot or export reads, with its type and range, declared
once as msgspec Structs. A loaded document is validated against them (recording/schema.py: a wrong field is
refused in one line naming its path) and decoded once into them (decode(): analysis/ and reporters/ read
attributes from then on); recording/document.py builds the documents `record` writes, keyed by these fields;
docs/recording-format.md describes every field (checked by tests/unit/test_document.py).
A key not declared here is dropped on decode (older files' context no report reads); a null or an empty object
reads as the field's default. Each field's comment is its description."""
from __future__ import annotations

import functools
from typing import Annotated, Any

import msgspec

from valkeytrace.recording.fields import U64, Bucket, Cpu, NonNeg, NonNegInt, Record, _d, _l, plain  # noqa: F401
from valkeytrace.recording.durability import CutState, DurabilityCheck, DurableFile  # noqa: F401
from valkeytrace.recording.cluster import Cluster, ClusterNode, ClusterShard, ConfigFsync, ConfigFsyncNode, Failover


class WarningNote(Record):
    code: str                    # what it says (reporters/sentences.py: WARNING_TYPES)
    figures: dict[str, Any] = _d()  # the figures its sentence states


class Histogram(Record):
    count: NonNegInt             # calls in the histogram
    sum_ns: U64                  # their total time
    min_ns: U64 | None           # the shortest
    max_ns: U64 | None           # the longest (null: the all-time maximum fell outside the window's top bucket)
    buckets: list[Bucket]        # [[bucket index, count], ...] (csrc/hist.c's log-linear buckets)
    bytes: U64 | None = None     # bytes the calls moved (AOF writes, socket writes)


# Sched, Requests and EventLoop: all their keys or none (schema.py)
class Sched(Record):
    on_cpu_ns: NonNegInt         # /proc/PID/task/TID/schedstat: time on a CPU over the window
    runqueue_ns: NonNegInt       # and time runnable, waiting for one


class ThreadRecord(Record):
    tid: NonNegInt               # the thread id (the main thread's is the pid)
    name: str                    # its comm (/proc/PID/task/TID/comm)
    role: str                    # its role (main, bio_aof, io_thread, ...: recomputed from name on analysis)
    calls: dict[str, Histogram] = _d()               # timed call -> histogram
    off_cpu_ns: dict[str, dict[str, NonNeg]] = _d()  # cause -> scheduler state -> ns switched out
    sched: Sched | None = None   # the kernel's own accounting of the thread over the window
    injected_ns: NonNegInt | None = None  # shim: the emulated delay it added


class Timeline(Record):
    events: list[tuple[int, NonNegInt, NonNegInt, str, str]] = _l()  # [start, duration, tid, cause, state]
    threshold_ns: NonNeg | None = None  # the shortest interval kept (shorter ones are in the sums only)


class Requests(Record):
    offset_ns: list[int] = _l()  # write-only windows: each client request event's time in the window
    conn: list[int] = _l()       # its connection
    event: list[int] = _l()      # arrival, read or reply
    tid: list[int] = _l()        # the server thread that saw it
    bytes: list[NonNegInt] | None = None  # what it read or wrote (0 for an arrival; older recordings lack it)


class EventLoop(Record):
    cycles: NonNegInt            # INFO stats eventloop_cycles over the window
    duration_us: NonNegInt       # INFO stats eventloop_duration_sum over the window


class Probe(Record):
    probe_groups: list[str] = _l()  # the probe groups loaded (sched, sockets, ...)
    loop_source: str | None = None  # what timed the event loop (a uprobe, the shim's epoll_wait)
    call_source: str | None = None  # what timed the calls (tracepoints, the shim's wrappers)
    untimed: list[str] = _l()    # calls the backend could not time
    sampled: dict[str, float] | None = None  # calls timed for a share of the window only: call -> share
    sampled_rse: dict[str, float] | None = None  # call -> the relative standard error of its estimated count
    inject: Any = None           # what the shim injected
    idle_cause: str | None = None  # the call the main thread sleeps in
    attach_ms: NonNeg | None = None   # how long the launch waited for its probes (compile and attach)
    compile_ms: NonNeg | None = None  # of which getting the program loaded (0: reused from an earlier launch)
    program_from: str | None = None  # compiler | cache (loaded from the compile cache) | reused
    compile_peak_rss_mb: NonNeg | None = None  # the compiling child process's peak memory (not the tracer's)
    binary: str | None = None    # the server binary the uprobes were placed on


class ServerExit(Record):
    at_s: float | None = None    # seconds into the window (in_window) or the run
    in_window: bool = False      # it ended inside the measured window
    signal: str | None = None    # the signal that killed it, or the one valkey logged it shut down on
    status: int | None = None    # its exit status (null when attached)
    cause: str | None = None     # its last error line, from its own log


class ServerWindow(Record):
    window_ns: NonNegInt         # the window's length
    backend: str | None = None   # the tracer that made the window (ebpf, shim)
    pid: NonNegInt | None = None  # the server's pid
    main_tid: NonNegInt | None = None  # its main thread
    threads: list[ThreadRecord] = _l()  # main first
    lost_events: NonNegInt | None = None  # ring-buffer events lost
    blocked_timeline: Timeline = msgspec.field(default_factory=Timeline)  # the main thread's blocked intervals
    requests: Requests | None = None  # write-only windows under eBPF: the write clients' requests, by column
    probe: Probe = msgspec.field(default_factory=Probe)  # what was probed
    hist_buckets: NonNegInt | None = None  # the histograms' bucket count
    eventloop: EventLoop | None = None  # the server's own event-loop counters
    shim: ServerWindow | None = None  # --backend both: the shim's window beside eBPF's
    start_mono_ns: int | None = None  # the window's start (CLOCK_MONOTONIC of its host): offsets count from it
    server_exit: ServerExit | None = None  # the server ended inside the window, which closes there
    offload: dict[str, Any] | None = None  # record --cluster: a node's own virtual offload over the window (runs[].offload's)


class Op(Record):
    role: str | None = None      # measured or background
    clients: NonNegInt | None = None  # the benchmark client's connections
    tps: NonNeg | None = None    # requests per second over the window
    requests: NonNegInt | None = None  # requests the client sent
    seconds: NonNeg | None = None  # its run's length
    mean_us: NonNeg | None = None  # mean latency
    min_us: NonNeg | None = None  # shortest
    p50_us: NonNeg | None = None  # median
    p95_us: NonNeg | None = None  # 95th percentile
    p99_us: NonNeg | None = None  # 99th percentile
    max_us: NonNeg | None = None  # longest
    started_at: NonNeg | None = None  # when the client started (Unix time)
    percentile_distribution: list[tuple[NonNeg, NonNeg, Any]] = _l()  # [percent, ms, count] rows
    cumulative_distribution: list = _l()  # the client's cumulative rows, as it printed them
    progress: list[tuple[float, float, float | None]] = _l()  # [seconds, rps, mean_ms] progress lines
    command: list | None = None  # the client's argv
    calibration_rps: NonNeg | None = None  # the rate the run was sized by
    calibration_s: NonNeg | None = None  # seconds its calibration pass took (0: sized by an earlier run's rate)
    attempts: NonNegInt | None = None  # windows measured to land on --duration (the last one kept)
    tries: list[tuple[NonNegInt, NonNeg]] = _l()  # each of them: [requests, window seconds]
    client_cpu_s: NonNeg | None = None  # the client's CPU time
    progress_samples: NonNegInt | None = None  # background op: progress lines inside the window
    note: str | None = None      # how the op's figures were taken
    mode: str | None = None      # open: record --rate's open loop (else a closed loop)
    offered_rate: NonNeg | None = None  # open loop: requests due in the window per second
    achieved_rate: NonNeg | None = None  # open loop: those answered by the drain's end per second
    saturated: bool | None = None  # open loop: achieved under 99% of offered
    service_p50_us: NonNeg | None = None  # open loop: from each request's send
    service_p99_us: NonNeg | None = None  # open loop: from each request's send
    late: NonNegInt | None = None  # open loop: sent 1 ms or more after due
    unanswered: NonNegInt | None = None  # open loop: never answered
    pipelined: NonNegInt | None = None  # open loop: sent on a connection with one in flight
    errors: NonNegInt | None = None  # open loop: error replies
    rejected: NonNegInt | None = None  # open loop: error replies from a server refusing the request (of errors)
    acked: NonNegInt | None = None  # open loop, --verify-durability: SETs acknowledged whose value was kept
    stall_requests: NonNegInt | None = None  # open loop, injected stalls: requests due during one
    stall_p50_us: NonNeg | None = None  # their latency (from the due moment)
    stall_p99_us: NonNeg | None = None
    outside_requests: NonNegInt | None = None  # requests due outside every stall
    outside_p50_us: NonNeg | None = None
    outside_p99_us: NonNeg | None = None
    client_us_per_request: NonNeg | None = None  # open loop: the client's CPU per request sent
    corrected_hist: dict | None = None  # open loop: latency from the due moment, the whole distribution
    service_hist: dict | None = None  # open loop: latency from the send, the whole distribution


class CommandStat(Record):
    calls: NonNeg | None = None  # calls over the window
    usec_per_call: NonNeg | None = None  # µs per call


class ServerView(Record):
    latencystats: dict[str, dict[str, float]] = _d()  # INFO latencystats: command -> percentile -> µs
    commandstats: dict[str, CommandStat] = _d()  # INFO commandstats of GET and SET
    latency_latest: list | None = None  # LATENCY LATEST (when the latency monitor is on)
    reset_at_window_start: bool | None = None  # CONFIG RESETSTAT at the window's start
    reply_blocking: dict | None = None  # a #3381 build's INFO debug reply_blocking_* figures
    latency_monitor_threshold_ms: int | None = None  # latency-monitor-threshold


class Replication(Record):
    rate_per_s: NonNeg | None = None  # record --replicas: the durability probe's rate
    replicas: NonNegInt | None = None  # N of its WAITAOF 1 N
    sent_ns: list[int] = _l()    # each probe's SET sent (CLOCK_MONOTONIC)
    set_us: list[NonNeg] = _l()  # its reply after the send
    waitaof_us: list[NonNeg] = _l()  # its WAITAOF's reply after the SET's send
    acked: list[NonNegInt] = _l()  # replicas the WAITAOF counted
    error: str | None = None     # why the probe stopped early


class CpuWait(Record):
    measured: float | None = None    # the measured client's share of its life waiting for a CPU
    background: float | None = None  # the background clients' share of the window


class HostCpu(Record):
    cpus: NonNegInt | None = None    # CPUs online
    wall_s: NonNeg | None = None     # the window's wall time
    host_cores: NonNeg | None = None  # /proc/stat: not idle (or the sampled busy, if more)
    server_cores: NonNeg | None = None  # the server process
    clients_cores: NonNeg | None = None  # the benchmark clients
    tracer_cores: NonNeg | None = None  # valkeytrace itself
    other_cores: NonNeg | None = None  # the rest
    steal_ms_by_cpu: list[NonNeg] | None = None  # the hypervisor's steal per CPU
    clients_cpu_wait: CpuWait | None = None  # the clients' share of time waiting for a CPU


class Demand(Record):
    op: str | None = None        # GET
    clients: NonNegInt | None = None  # its clients
    requests: NonNegInt | None = None  # requests it sent
    seconds: NonNeg | None = None  # its window
    tps: NonNeg | None = None    # its rate
    mean_us: NonNeg | None = None  # its mean latency
    p50_us: NonNeg | None = None  # its median
    p99_us: NonNeg | None = None  # its 99th percentile
    host_cpu: HostCpu | None = None  # the CPU it took
    loaded: Demand | None = None  # the GET pass with the background clients reading
    error: str | None = None     # why it was not measured


class Load(Record):
    mode: str = "open"           # open: the measured op on a schedule (record --rate)
    rate: float | None = None    # requests due per second
    arrival: str | None = None   # poisson or uniform
    pool: str = "grow"           # fixed: `connections`, one request in flight each (held when all wait); grow
                                 # (and older recordings, which lack it): to 256, then pipelined
    connections: NonNegInt | None = None  # the fixed pool's connections


class MemorySeries(Record):
    hz: NonNegInt | None = None  # samples a second asked for
    columns: list[str] = _l()    # what each sample holds (tracers/memory.py COLUMNS)
    samples: list[list[float | None]] = _l()  # one row per sample; null: no source gave the figure then
    aof_delayed_fsync: NonNegInt | None = None  # INFO's aof_delayed_fsync over the window (everysec's postponed writes)
    stalls: list[list[float | None]] | None = None  # the injected stalls in the window: [start, end] s from its start
    sources: dict = _d()         # where each figure comes from


class ReplicaReads(Record):
    readers: NonNegInt = 0       # connections reading from the replica
    reads: NonNegInt = 0         # GETs answered whose send was in the window (REPLICA_GET's requests)
    misses: NonNegInt = 0        # of which nil
    with_sequence: NonNegInt = 0  # of which a value carrying its SET's sequence
    log_stride: NonNegInt = 1    # the log keeps every log_stride-th of those (a uniform sample)
    log: dict[str, list[int]] = _d()  # write_ns (the value's SET sent), send_ns, recv_ns: CLOCK_MONOTONIC


class BpfProgram(Record):
    name: str                    # the program (bcc's function name)
    attach: str | None = None    # what it is attached to: tracepoint:cat:event, raw_tracepoint:event, uprobe:symbols
    runs: NonNegInt = 0          # times it ran in the window (the kernel's run_cnt)
    run_ns: NonNegInt = 0        # the time those runs took (the kernel's run_time_ns)


class TracerCost(Record):
    programs: list[BpfProgram] = _l()  # every program loaded (empty when the kernel's statistics could not be read)
    stats_enabled: int | None = None  # kernel.bpf_stats_enabled as found (never written: tracers/bpf_cost.py)
    counted: bool | None = None  # whether the statistics were on in the window
    requests: NonNegInt | None = None  # GET + SET the server counted in the window (INFO commandstats)
    bpf_ns_per_request: NonNeg | None = None  # the programs' run time over them
    tracer_cpu_pct_of_core: NonNeg | None = None  # valkeytrace's process CPU while attached (between the edges)
    window_edges_cpu_ms: NonNeg | None = None  # its CPU reading the maps at the window's begin and end
    peak_rss_mb: NonNeg | None = None  # its peak resident memory so far


class RunTracer(Record):
    cost: TracerCost | None = None  # the eBPF tracer's (tracers/bpf_cost.py)


class RunShard(Record):
    shard: NonNegInt = 0         # its index in cluster.shards
    port: NonNegInt | None = None  # the primary its clients wrote to
    keys: NonNegInt = 0          # the keyspace's keys in its slots
    ops: dict[str, Op] = _d()    # as runs[].ops, its clients' alone


class Run(Record):
    workload: str                # read-heavy, write-only or none
    value_size: Annotated[int, msgspec.Meta(ge=1, le=1 << 31)]  # bytes per value
    status: str                  # ok, failed or running
    repeat: NonNegInt | None = None  # the repeat's number
    error: str | None = None     # why it failed
    started_at: float | None = None  # Unix time
    ended_at: float | None = None  # Unix time
    window_start: float | None = None  # the measured window (Unix time)
    window_end: float | None = None  # its end
    ops: dict[str, Op] = _d()    # GET / SET -> the client's figures
    server: ServerWindow | None = None  # the tracer's window
    server_view: ServerView = msgspec.field(default_factory=ServerView)  # what the server itself said of the window
    host_cpu: HostCpu | None = None  # cores per consumer over the window, steal by CPU
    demand: Demand | None = None  # the GET-only pass the what-if builds on
    fsync_extra_delay_ns: NonNegInt | None = None  # --fsync-sensitivity: the run's added delay
    offload: dict[str, Any] | None = None  # --emulate-offload: the virtual offload's counters over the window (and load_rejected_writes: over the whole load)
    launch: NonNegInt | None = None  # valkeytrace compare: the server launch the run belongs to
    replicas: list[ServerWindow] = _l()  # record --replicas: each replica's tracer window
    replication: Replication | None = None  # record --replicas: the durability probe's timings
    server_exit: ServerExit | None = None  # the server ended during the run
    load: Load | None = None     # record --rate: the open loop's rate (null: a closed loop)
    memory: MemorySeries | None = None  # what the server held over the window, sampled (tracers/memory.py)
    durability_check: DurabilityCheck | None = None  # --verify-durability (the launch's last run): acked writes reloaded
    replica_reads: ReplicaReads | None = None  # --replica-get-clients: the replica readers' reads
    tracer: RunTracer | None = None  # what the tracer itself cost over the window
    shards: list[RunShard] = _l()  # record --cluster: each shard's ops (its own clients')
    node_windows: list[ServerWindow | None] = _l()  # record --cluster: cluster.nodes' tracer windows but shard 0's primary's
    failover: Failover | None = None  # record --failover: the kill, the promotion, the witness
    config_fsync: ConfigFsync | None = None  # record --cluster (eBPF): the nodes' nodes.conf syncs in the window


class ServerInfo(Record):
    mode: str | None = None      # embedded, command or attach
    pid: NonNegInt | None = None  # the server's pid
    port: int | None = None      # its port
    command: list | None = None  # its argv
    binary: str | None = None    # its executable
    version: str | None = None   # its version
    server_name: str | None = None  # INFO server's server_name (valkey; redis for a Redis server)
    config: dict = _d()          # CONFIG GET of the settings that matter
    appendonly: bool | None = None  # AOF on
    appendfsync: str | None = None  # always, everysec, no
    io_threads: NonNegInt | None = None  # io-threads
    bio_aof_offload: bool | None = None  # #3381's bio-aof-offload-enabled (null: not such a build)
    replication: dict | None = None  # INFO replication at the start: role, master_replid, master_repl_offset


class Placement(Record):
    requested: str | None = None  # --client-cpus: auto, none or a CPU list
    client_cpus: list[Cpu] | None = None  # the CPUs every benchmark client ran on (null: any)
    server_cpus: list[Cpu] | None = None  # the server's affinity when the recording began
    host_cpus: list[Cpu] | None = None  # the CPUs valkeytrace could use
    server_moved: bool | None = None  # valkeytrace placed the server on CPUs of its own (launched servers)
    background_slice_us: NonNeg | None = None  # the EEVDF slice the background clients ask for
    background_nice: int | None = None  # their niceness when placed


class Client(Record):
    name: str | None = None      # the benchmark client's name
    version: str | None = None   # its version
    path: str | None = None      # its path
    placement: Placement = msgspec.field(default_factory=Placement)  # where it ran


class Settings(Record):
    workloads: list[str] = _l()  # the workloads recorded
    sizes: list[Annotated[int, msgspec.Meta(ge=1)]] = _l()  # value sizes
    repeat: NonNegInt | None = None  # repeats of each cell
    duration_s: NonNeg | None = None  # each measured window's length asked for
    keyspace: NonNegInt | None = None  # keys
    get_clients: NonNegInt | None = None  # GET clients (read-heavy)
    set_clients: NonNegInt | None = None  # background SET clients (read-heavy)
    write_clients: NonNegInt | None = None  # SET clients (write-only)
    backend: str | None = None   # the tracer
    fsync_sensitivity_ns: list[NonNegInt] = _l()  # --fsync-sensitivity's added delays
    fsync_sensitivity_runs: NonNegInt | None = None  # runs per added delay
    # [short, long] shares of duration_s a window is kept within (a single share, either way, in recordings of
    # 2026-12-06 before). Not a tuple: msgspec 0.23 crashes converting [x, null] to tuple[...] | NonNeg
    window_accept: list[NonNeg | None] | NonNeg | None = None
    rates: list[NonNeg] = _l()   # --rates: the open-loop rates, a cell each
    arrival: str | None = None   # the open loop's arrivals: poisson or uniform
    set_rate: NonNeg | None = None  # read-heavy's background SETs open-loop at this rate (null: closed loop)
    connections: str | None = None  # --connections: clients (a fixed pool, one in flight each) or grow
    demand_pass: bool | None = None  # false: recorded with --no-demand-pass (no GET-only passes for the model)


class FsyncDelay(Record):
    median_ns: NonNeg | None = None  # --inject-fsync-delay's median
    sigma: NonNeg | None = None  # its log-normal spread
    kind: str | None = None      # const or lognormal
    spec: str | None = None      # as given
    env: str | None = None       # as the shim reads it
    stall_ns: NonNeg | None = None  # a disk that stalls: one call this much longer ...
    stall_period_ns: NonNeg | None = None  # ... in every this much wall time
    blocks_writes: bool | None = None  # ,blocks-writes: a write to a file waits while its sync runs


class AtExit(Record):
    state: str | None = None     # running, draining, drained or failed
    shutdown_drains: NonNegInt = 0  # drains on valkey's own shutdown path
    held_replies_dropped: NonNegInt = 0  # replies still held when the server ended
    signals: NonNegInt = 0       # signals the server got
    last_signal: str | None = None  # the last of them
    obuf_closed: NonNegInt = 0   # clients closed over their client-output-buffer-limit


class EmulationOffload(Record):
    mode: str | None = None      # durable or early-ack
    gather_ns: NonNeg | None = None  # --offload-gather
    gather_source: str | None = None  # how the gather window was chosen (compare --candidate-offload-gather auto)
    max_pending: NonNegInt | None = None  # --offload-max-pending: the bound (replies held + commands pending)
    overflow: str | None = None  # --offload-overflow over it: pause or reject
    replicas: str | None = None  # --offload-replicas (with --replicas): immediate, committed or replica-blocking
    design: str | None = None    # --offload-design: bio-write (also when absent), bio-write-block or main-write
    at_exit: AtExit = msgspec.field(default_factory=AtExit)  # what the emulation did as the server ended


class Emulation(Record):
    fsync_delay: FsyncDelay = msgspec.field(default_factory=FsyncDelay)  # the injected fsync delay
    fsync_sensitivity_ns: list[NonNegInt] = _l()  # the sensitivity levels
    description: str | None = None  # the sentence every report shows
    offload: EmulationOffload | None = None  # --emulate-offload: {mode, gather_ns, gather_source?}
    fsync_error: str | None = None  # --inject-fsync-error: "eio@N" (the Nth fsync failed)


class Overhead(Record):
    backend: str | None = None   # the tracer measured
    cell: str | None = None      # the cell it was measured on
    duration_s: NonNeg | None = None  # each pass's length
    order: str | None = None     # traced first or untraced first
    untraced_side: str | None = None  # how the untraced pass was made
    get_tps_ratio: float | None = None  # GET TPS traced / untraced
    get_p99_ratio: float | None = None  # GET p99 traced / untraced
    note: str | None = None      # what one pair is worth


class Timing(Record):
    """Where a launch's wall time went (epoch seconds): benchmarks/walltime.py reads it."""
    began: float | None = None         # valkeytrace began the launch
    server_ready: float | None = None  # its server answered and was described (replicas synced)
    tracer_ready: float | None = None  # the probes attached (the first run starts after)
    ended: float | None = None         # the server stopped, the recording about to be written


class Launch(Record):
    launch: NonNegInt | None = None  # the launch's number
    side: str | None = None      # baseline or candidate
    pid: NonNegInt | None = None  # its server's pid
    version: str | None = None   # its server's version
    started_at: float | None = None  # its first run's start
    complete: bool | None = None  # every run of it finished
    timing: Timing | None = None  # where its wall time went


class Node(Record):
    role: str                    # primary or replica
    pid: NonNegInt | None = None  # its pid
    port: int | None = None      # its port
    version: str | None = None   # its version
    config: dict | None = None   # its CONFIG GET
    primary_port: int | None = None  # a replica's primary
    fsync_delay: FsyncDelay | None = None  # the fsync delay its shim injected
    host: dict | None = None     # valkeytrace merge: the host it ran on (as the document's host)
    recording: str | None = None  # valkeytrace merge: the recording it came from
    clock_offset_ns: int | None = None  # valkeytrace merge: its clock minus the primary's
    clock_error_ns: NonNegInt | None = None  # the estimate's half-width
    clock_source: str | None = None  # replication exchange, or one host (the same boot: one clock)
    clock_exchange_ns: int | None = None  # one host: what the exchange estimated all the same (truth: 0)


class Document(Record):
    format: str                  # "valkeytrace-recording"
    version: int                 # the document's version (the container's format line)
    label: str                   # the system's name in reports
    runs: list[Run]              # one per (repeat, workload, value size), in order
    complete: bool = False       # false when interrupted or a run failed
    created: str | None = None   # when it began
    ended: str | None = None     # when it ended
    valkeytrace_version: str | None = None  # the valkeytrace that made it
    argv: list | None = None     # its command line
    server: ServerInfo = msgspec.field(default_factory=ServerInfo)  # the server recorded
    host: dict = _d()            # the host (kernel, CPUs, memory, the AOF's storage)
    client: Client = msgspec.field(default_factory=Client)  # the benchmark client
    settings: Settings = msgspec.field(default_factory=Settings)  # the matrix's settings
    emulation: Emulation = msgspec.field(default_factory=Emulation)  # what was emulated
    warnings: list[str | WarningNote] = _l()  # what every report shows (a sentence in files made before codes)
    overhead: Overhead | None = None  # record --measure-overhead's passes
    tracer: dict | None = None   # backend, peak_rss_kb
    timing: Timing | None = None  # where the launch's wall time went
    upgraded_from: int | None = None  # set on load: an older file's version
    launches: list[Launch] = _l()  # valkeytrace compare: one entry per server launch of this side
    nodes: list[Node] = _l()     # record --replicas, valkeytrace merge: the primary and its replicas
    cluster: Cluster | None = None  # record --cluster: its shards, slots and nodes
    merged_from: list[str] = _l()  # valkeytrace merge: the recordings it joined, the primary's first


TYPES = (Document, WarningNote, ServerInfo, Client, Placement, Settings, Emulation, FsyncDelay, EmulationOffload, AtExit, Run, Op,
         ServerView, CommandStat, Replication, Node, ServerWindow, ThreadRecord, Sched, Timeline, Requests, EventLoop,
         Histogram, Probe, ServerExit, HostCpu, CpuWait, Demand, Load, Overhead, Launch, Timing, ReplicaReads, TracerCost,
         BpfProgram, RunTracer, RunShard, Cluster, ClusterShard, ClusterNode, Failover, ConfigFsync, ConfigFsyncNode)


def fields(t: type) -> tuple[str, ...]:
    """A record's declared field names."""
    return t.__struct_fields__  # type: ignore[attr-defined]


def _plain(x: Any, ti: Any = None) -> Any:
    """recording/fields.plain over the whole document unless told which part."""
    return plain(x, _info(Document) if ti is None else ti)


@functools.cache
def _info(t: type) -> Any:
    import msgspec.inspect as mi

    return mi.type_info(t)


def decode(doc: dict | Document) -> Document:
    """A loaded (or built) document as its declared types; one already decoded as it is."""
    if isinstance(doc, Document):
        return doc
    # lax: a document built in memory may hold an integral float for a count (a file's was strict: schema.py)
    return msgspec.convert(_plain(doc), Document, strict=False)


def decode_as(value: Any, t: type) -> Any:
    """A part of a document (a run, a window) as its declared type; one already decoded as it is."""
    if isinstance(value, t):
        return value
    return msgspec.convert(_plain(value, _info(t)), t, strict=False)
