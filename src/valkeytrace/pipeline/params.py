"""The simulated pipeline's inputs and outputs (pipeline/sim.py runs them).

Every figure here is a measured one in the caller's hands (analysis/calibration.py takes each from a
recording and keeps its source beside it): the simulation itself knows no host, no recording and no
constant of its own.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

MODES = ("main", "durable", "early-ack")  # who makes writes durable: the main thread (appendfsync always),
#                                         or an offload thread, replies held until durable or not


@dataclass(frozen=True)
class Sampler:
    """A duration distribution (µs): draws from measured values, each moved by `shift_us`, never
    below `floor_us` (a delay removed from a call cannot make it shorter than the call itself)."""
    values_us: tuple
    shift_us: float = 0.0
    floor_us: float = 0.0
    lognormal_median_us: float = 0.0   # and a log-normal delay added to each draw (--inject-fsync-delay lognormal:)
    lognormal_sigma: float = 0.0

    def draws(self, rng: np.random.Generator, n: int) -> np.ndarray:
        vals = np.asarray(self.values_us, dtype=np.float64)
        if not len(vals):
            return np.zeros(n)
        out = rng.choice(vals, size=n) + self.shift_us
        if self.lognormal_median_us:
            out = out + self.lognormal_median_us * np.exp(self.lognormal_sigma * rng.standard_normal(n))
        return np.maximum(out, self.floor_us)

    @property
    def median_us(self) -> float:
        if not self.values_us:
            return 0.0
        return float(max(np.median(self.values_us) + self.shift_us + self.lognormal_median_us, self.floor_us))


@dataclass(frozen=True)
class Interference:
    """What else takes a CPU from the pipeline's threads (other tasks, the hypervisor's steal): stalls at
    `rate_per_s` (a Poisson process in time) of measured lengths."""
    rate_per_s: float = 0.0
    stall: Sampler = Sampler(())


@dataclass(frozen=True)
class Jitter:
    """A share of the replies delayed on their way to the client by an exponential delay of mean_us
    (what the clients' latency tail holds beyond every CPU the kernel saw them wait for)."""
    share: float = 0.0
    mean_us: float = 0.0


@dataclass(frozen=True)
class ClientCosts:
    """One benchmark process (a single-threaded event loop, as redis-benchmark and valkey-benchmark are):
    what it spends on CPU per reply read, per request written, and per pass of its loop."""
    read_us: float
    write_us: float
    pass_us: float = 0.0
    wake_us: float = 0.0   # from a reply's arrival to the sleeping client running


@dataclass(frozen=True)
class ServerCosts:
    """The server's CPU per request by op (read + parse + execute on the main thread), per reply written,
    per loop iteration, and the wake-up of a main thread asleep in epoll_wait; with I/O threads, the
    reads and writes move to the I/O thread (io_read_us, io_write_us) and the main thread keeps exec_us."""
    read_us: dict
    write_us: float
    iteration_us: float = 0.0
    wake_us: float = 0.0
    exec_us: dict = field(default_factory=dict)
    io_read_us: float = 0.0
    io_write_us: float = 0.0
    deliver_us: float = 0.0  # the offload thread: a held reply written to its client
    sync_cpu_us: float = 0.0  # an AOF write + fdatasync's own CPU time (an offload job's, on the server's CPU)


@dataclass(frozen=True)
class Durability:
    mode: str                  # MODES
    sync: Sampler              # one fdatasync (the main thread's under always, a job's under an offload)
    aof_write: Sampler         # one AOF write()
    gather_us: float = 0.0     # an offload job starts this long after the later of its first write and the
    #                            previous job's end (record --offload-gather)
    job_interval_us: float = 0.0  # a job starts at least this long after the previous one's start (everysec: 1 s)
    stall_us: float = 0.0      # a disk that stalls: the first sync at or after each stall_period_us of simulated
    stall_period_us: float = 0.0  # time takes stall_us more (record --inject-fsync-delay ...,stall:S/P)
    design: str = "bio-write"  # an offload's hand-off (record --offload-design): bio-write-block's main thread waits
    #                            while a job runs; main-write's main thread writes, its jobs fdatasync only


@dataclass(frozen=True)
class Group:
    """One benchmark process: `clients` connections sending `op` in a closed loop (each its next request
    after its reply), or, with `rate`, requests due on a schedule (open loop): over `clients` connections
    with one request in flight each (pool "fixed": a request due while all wait is held until one is
    answered), or each on a connection of its own (pool "grow": the client's pool grows, then pipelines)."""
    op: str
    clients: int
    measured: bool = True
    rate: float | None = None
    arrival: str = "poisson"
    pool: str = "fixed"


@dataclass(frozen=True)
class Params:
    groups: tuple
    server: ServerCosts
    client: ClientCosts
    durability: Durability
    io_threads: int = 1
    keyspace: int = 100000
    value_size: int = 64
    aof_bytes_per_write: float = 0.0  # AOF bytes a SET adds (measured: the AOF writes' bytes per SET)
    duration_s: float = 2.0
    warmup_s: float = 0.3
    shared_client_cpu: bool = True    # the benchmark processes share one CPU (record --client-cpus auto here)
    interference: Interference = Interference()         # on the server's CPU
    client_interference: Interference = Interference()  # on the clients' CPU
    jitter: "Jitter | None" = None                      # delays of a reply on its way, no CPU taken
    drain_s: float = 2.0                                # open loop: how long after the window a due request may
    #                                                     still be answered and counted (the real client's)


@dataclass
class OpResult:
    op: str
    requests: int
    tps: float
    p50_us: float | None
    p95_us: float | None
    p99_us: float | None
    mean_us: float | None
    latencies_us: np.ndarray | None = None  # kept for the tests and the plots, never encoded
    open: "OpenFigures | None" = None  # open loop: the rates, saturation, the service time

    def figures(self) -> dict:
        return {"tps": self.tps, "p50_us": self.p50_us, "p95_us": self.p95_us, "p99_us": self.p99_us,
                "mean_us": self.mean_us, **(asdict(self.open) if self.open else {})}


@dataclass
class OpenFigures:
    offered_rate: float
    achieved_rate: float
    saturated: bool
    service_p50_us: float | None
    service_p99_us: float | None


@dataclass
class SimResult:
    ops: dict                  # op -> OpResult (the measured groups)
    background: dict           # op -> OpResult (the other groups)
    iterations_per_s: float
    syncs_per_s: float         # fdatasyncs, on whichever thread
    writes_per_sync: float | None
    jobs_waited_per_write: float | None
    seconds: float
    events: int
    held_peak: int = 0         # the most replies held at once (a durable offload), after the warm-up
