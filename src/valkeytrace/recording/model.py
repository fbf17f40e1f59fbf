"""The recording's declared model: every key a report, plot or export reads, with its type and
range, declared once. msgspec validates a loaded document against these types (recording/schema.py:
a wrong field is refused in one line naming its path); recording/document.py builds documents of
them; docs/recording-format.md's field tables are generated from them (scripts/recording-fields.py,
checked by tests/unit/test_document.py).

The types are TypedDicts, so that a document stays the plain dict every layer reads; a key not
declared here is kept as it is (older files, context no report reads). Each key's comment is its
description in the generated tables.
"""
from __future__ import annotations

from typing import Annotated, Any, TypedDict

import msgspec

from valkeytrace.layout import HIST_BUCKETS

try:
    from typing import Required
except ImportError:  # Python < 3.11
    from typing_extensions import Required

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
NonNeg = Annotated[float, msgspec.Meta(ge=0)]
U64 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # msgspec bounds fit an int64
Cpu = Annotated[int, msgspec.Meta(ge=0, le=1 << 20)]
Bucket = tuple[Annotated[int, msgspec.Meta(ge=0, le=HIST_BUCKETS - 1)], Annotated[int, msgspec.Meta(ge=0, le=1 << 62)]]


class Histogram(TypedDict, total=False):
    count: Required[NonNegInt]   # calls in the histogram
    sum_ns: Required[U64]        # their total time
    min_ns: Required[U64]        # the shortest
    max_ns: Required[U64]        # the longest
    buckets: Required[list[Bucket]]  # [[bucket index, count], ...] (csrc/hist.c's log-linear buckets)
    bytes: U64 | None            # bytes the calls moved (AOF writes, socket writes)


# Sched, Requests and EventLoop: all their keys or none ({} when the window has none: schema.py)
class Sched(TypedDict, total=False):
    on_cpu_ns: NonNegInt    # /proc/PID/task/TID/schedstat: time on a CPU over the window
    runqueue_ns: NonNegInt  # and time runnable, waiting for one


class ThreadRecord(TypedDict, total=False):
    tid: Required[NonNegInt]     # the thread id (the main thread's is the pid)
    name: Required[str]          # its comm (/proc/PID/task/TID/comm)
    role: Required[str]          # its role (main, bio_aof, io_thread, ...: recomputed from name on analysis)
    calls: dict[str, Histogram] | None               # timed call -> histogram
    off_cpu_ns: dict[str, dict[str, NonNeg]] | None  # cause -> scheduler state -> ns switched out
    sched: Sched | None          # the kernel's own accounting of the thread over the window
    injected_ns: NonNegInt | None  # shim: the emulated delay it added


class Timeline(TypedDict, total=False):
    events: list[tuple[int, NonNegInt, NonNegInt, str, str]] | None  # [start, duration, tid, cause, state]


class Requests(TypedDict, total=False):
    offset_ns: list[int]  # write-only windows: each client request event's time in the window
    conn: list[int]       # its connection
    event: list[int]      # arrival, read or reply
    tid: list[int]        # the server thread that saw it
    bytes: list[NonNegInt] | None  # what it read or wrote (0 for an arrival; older recordings lack it)


class EventLoop(TypedDict, total=False):
    cycles: NonNegInt       # INFO stats eventloop_cycles over the window
    duration_us: NonNegInt  # INFO stats eventloop_duration_sum over the window


class ServerWindow(TypedDict, total=False):
    backend: str | None          # the tracer that made the window (ebpf, shim)
    window_ns: Required[NonNegInt]  # the window's length
    pid: NonNegInt | None        # the server's pid
    main_tid: NonNegInt | None   # its main thread
    threads: list[ThreadRecord] | None  # main first
    lost_events: NonNegInt | None  # ring-buffer events lost
    blocked_timeline: Timeline | None  # the main thread's blocked intervals
    requests: Requests | None    # write-only windows under eBPF: the write clients' requests, by column
    probe: dict | None           # what was probed (groups, loop_source, call_source, untimed, inject)
    hist_buckets: NonNegInt | None  # the histograms' bucket count
    eventloop: EventLoop | None  # the server's own event-loop counters
    shim: ServerWindow | None    # --backend both: the shim's window beside eBPF's
    start_mono_ns: NonNegInt | None  # the window's start (CLOCK_MONOTONIC of its host): offsets count from it
    server_exit: dict | None     # the server ended inside the window, which closes there (runs[].server_exit)


class Op(TypedDict, total=False):
    role: str | None             # measured or background
    clients: NonNegInt | None    # the benchmark client's connections
    tps: NonNeg | None           # requests per second over the window
    requests: NonNegInt | None   # requests the client sent
    seconds: NonNeg | None       # its run's length
    mean_us: NonNeg | None       # mean latency
    min_us: NonNeg | None        # shortest
    p50_us: NonNeg | None        # median
    p95_us: NonNeg | None        # 95th percentile
    p99_us: NonNeg | None        # 99th percentile
    max_us: NonNeg | None        # longest
    started_at: NonNeg | None    # when the client started (Unix time)
    percentile_distribution: list[tuple[NonNeg, NonNeg, Any]] | None  # [percent, ms, count] rows
    cumulative_distribution: list | None  # the client's cumulative rows, as it printed them
    progress: list[tuple[float, float, float | None]] | None  # [seconds, rps, mean_ms] progress lines
    command: list | None         # the client's argv
    calibration_rps: NonNeg | None  # the rate the run was sized by
    client_cpu_s: NonNeg | None  # the client's CPU time
    progress_samples: NonNegInt | None  # background op: progress lines inside the window
    note: str | None             # how the op's figures were taken


class ServerView(TypedDict, total=False):
    latencystats: dict[str, dict[str, float]] | None  # INFO latencystats: command -> percentile -> µs
    commandstats: dict | None    # INFO commandstats of GET and SET
    latency_latest: list | None  # LATENCY LATEST (when the latency monitor is on)
    reset_at_window_start: bool | None  # CONFIG RESETSTAT at the window's start
    reply_blocking: dict | None  # a #3381 build's INFO debug reply_blocking_* figures
    latency_monitor_threshold_ms: int | None  # latency-monitor-threshold


class Replication(TypedDict, total=False):
    rate_per_s: NonNeg | None    # record --replicas: the durability probe's rate
    replicas: NonNegInt | None   # N of its WAITAOF 1 N
    sent_ns: list[int] | None    # each probe's SET sent (CLOCK_MONOTONIC)
    set_us: list[NonNeg] | None  # its reply after the send
    waitaof_us: list[NonNeg] | None  # its WAITAOF's reply after the SET's send
    acked: list[NonNegInt] | None  # replicas the WAITAOF counted
    error: str | None            # why the probe stopped early


class Node(TypedDict, total=False):
    role: Required[str]          # primary or replica
    pid: NonNegInt | None        # its pid
    port: int | None             # its port
    version: str | None          # its version
    config: dict | None          # its CONFIG GET
    primary_port: int | None     # a replica's primary
    fsync_delay: FsyncDelay | None  # the fsync delay its shim injected (--inject-fsync-delay, --replica-fsync-delay)
    host: dict | None            # valkeytrace merge: the host it ran on (as the document's host)
    recording: str | None        # valkeytrace merge: the recording it came from
    clock_offset_ns: int | None  # valkeytrace merge: its clock minus the primary's, from the replication exchange
    clock_error_ns: NonNegInt | None  # the estimate's half-width (the exchange's one-way delays bound it)
    clock_source: str | None     # replication exchange, or one host (the same boot: one clock)
    clock_exchange_ns: int | None  # one host: what the exchange estimated all the same (truth: 0)


class Run(TypedDict, total=False):
    workload: Required[str]      # read-heavy, write-only or none
    value_size: Required[Annotated[int, msgspec.Meta(ge=1, le=1 << 31)]]  # bytes per value
    repeat: NonNegInt | None     # the repeat's number
    status: Required[str]        # ok, failed or running
    error: str | None            # why it failed
    started_at: float | None     # Unix time
    ended_at: float | None       # Unix time
    window_start: float | None   # the measured window (Unix time)
    window_end: float | None     # its end
    ops: dict[str, Op] | None    # GET / SET -> the client's figures
    server: ServerWindow | None  # the tracer's window
    server_view: ServerView | None  # what the server itself said of the window
    host_cpu: dict | None        # cores per consumer over the window, steal by CPU
    demand: dict | None          # the GET-only pass the what-if builds on
    fsync_extra_delay_ns: NonNegInt | None  # --fsync-sensitivity: the run's added delay
    offload: dict | None         # --emulate-offload: the virtual offload's counters over the window
    launch: NonNegInt | None     # valkeytrace compare: the server launch the run belongs to
    replicas: list[ServerWindow] | None  # record --replicas: each replica's tracer window
    replication: Replication | None  # record --replicas: the durability probe's timings
    server_exit: dict | None     # the server ended during the run: {"at_s" (into its window), "in_window", "signal" | "status"}


class ServerInfo(TypedDict, total=False):
    mode: str | None             # embedded, command or attach
    pid: NonNegInt | None        # the server's pid
    port: int | None             # its port
    command: list | None         # its argv
    binary: str | None           # its executable
    version: str | None          # its version
    config: dict | None          # CONFIG GET of the settings that matter
    appendonly: bool | None      # AOF on
    appendfsync: str | None      # always, everysec, no
    io_threads: NonNegInt | None  # io-threads
    bio_aof_offload: bool | None  # #3381's bio-aof-offload-enabled (null: not such a build)
    replication: dict | None     # INFO replication at the start: role, master_replid, master_repl_offset, its primary


class Placement(TypedDict, total=False):
    requested: str | None        # --client-cpus: auto, none or a CPU list
    client_cpus: list[Cpu] | None  # the CPUs every benchmark client ran on (null: any)
    server_cpus: list[Cpu] | None  # the server's affinity when the recording began
    host_cpus: list[Cpu] | None  # the CPUs valkeytrace could use


class Client(TypedDict, total=False):
    name: str | None             # the benchmark client's name
    version: str | None          # its version
    path: str | None             # its path
    placement: Placement | None  # where it ran


class Settings(TypedDict, total=False):
    workloads: list[str] | None  # the workloads recorded
    sizes: list[Annotated[int, msgspec.Meta(ge=1)]] | None  # value sizes
    repeat: NonNegInt | None     # repeats of each cell
    duration_s: NonNeg | None    # each measured window's length asked for
    keyspace: NonNegInt | None   # keys
    get_clients: NonNegInt | None  # GET clients (read-heavy)
    set_clients: NonNegInt | None  # background SET clients (read-heavy)
    write_clients: NonNegInt | None  # SET clients (write-only)
    backend: str | None          # the tracer
    fsync_sensitivity_ns: list[NonNegInt] | None  # --fsync-sensitivity's added delays
    fsync_sensitivity_runs: NonNegInt | None  # runs per added delay


class FsyncDelay(TypedDict, total=False):
    median_ns: NonNeg | None     # --inject-fsync-delay's median
    sigma: NonNeg | None         # its log-normal spread


class Emulation(TypedDict, total=False):
    fsync_delay: FsyncDelay | None  # the injected fsync delay
    fsync_sensitivity_ns: list[NonNegInt] | None  # the sensitivity levels
    description: str | None      # the sentence every report shows
    offload: dict | None         # --emulate-offload: {mode, gather_ns, gather_source?}
    fsync_error: str | None      # --inject-fsync-error: "eio@N" (the Nth fsync failed)


class Document(TypedDict, total=False):
    format: Required[str]        # "valkeytrace-recording"
    version: Required[int]       # the document's version (the container's format line)
    label: Required[str]         # the system's name in reports
    complete: bool | None        # false when interrupted or a run failed
    created: str | None          # when it began
    ended: str | None            # when it ended
    valkeytrace_version: str | None  # the valkeytrace that made it
    argv: list | None            # its command line
    server: ServerInfo | None    # the server recorded
    host: dict | None            # the host (kernel, CPUs, memory, the AOF's storage)
    client: Client | None        # the benchmark client
    settings: Settings | None    # the matrix's settings
    emulation: Emulation | None  # what was emulated
    warnings: list[str] | None   # sentences every report shows
    runs: Required[list[Run]]    # one per (repeat, workload, value size), in order
    overhead: dict | None        # record --measure-overhead's passes
    tracer: dict | None          # backend, peak_rss_kb
    upgraded_from: int | None    # set on load: an older file's version
    launches: list | None        # valkeytrace compare: one entry per server launch of this side
    nodes: list[Node] | None     # record --replicas, valkeytrace merge: the primary and its replicas
    merged_from: list[str] | None  # valkeytrace merge: the recordings it joined, the primary's first


TYPES = (Document, ServerInfo, Client, Placement, Settings, Emulation, FsyncDelay, Run, Op, ServerView, Replication, Node,
         ServerWindow, ThreadRecord, Sched, Timeline, Requests, EventLoop, Histogram)
