"""The server summary a cell's report carries, as declared types (analysis/server.py builds them
from the tracers' raw windows; the model, the claims, the tables and every reporter read them by
attribute). Each key a report's JSON shows (docs/report-json.md: cells[].server) is a field name
here and nowhere else; `to_json()` gives that JSON.

Two registries live here too: the main thread's budget categories (each with the calls, by the
VT_CALL_* names of csrc/valkeytrace.h, whose off-CPU time it takes; tests/unit/test_summary.py
checks them against the header) and the timed calls a thread table shows.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BudgetCategory:
    name: str            # the MainThread field (a percentage of wall)
    label: str           # how reports say it
    calls: tuple = ()    # the calls (VT_CALL_* names) whose blocked time it takes
    runnable: bool = False  # the time spent runnable, whatever the call
    component: str | None = None  # analysis/model.py's component of the same time


# the six parts of the main thread's wall time, in report order; they sum to 100% by construction
BUDGET = (BudgetCategory("on_cpu_pct", "on CPU", component="on_cpu"),
          BudgetCategory("blocked_in_fsync_pct", "blocked in fsync", ("fdatasync", "fsync"), component="fsync"),
          BudgetCategory("blocked_in_aof_write_pct", "blocked in AOF write", ("aof_write",), component="aof_write"),
          BudgetCategory("waiting_for_cpu_pct", "waiting for a CPU", runnable=True, component="cpu_wait"),
          BudgetCategory("idle_pct", "idle (epoll_wait)", ("epoll_wait",)),
          BudgetCategory("other_blocked_pct", "other blocked", component="other_blocked"))
BUDGET_BY_NAME = {c.name: c for c in BUDGET}
# the calls a thread table shows, in order (names as in csrc/valkeytrace.h's VT_CALL_*)
TIMED_CALLS = ("fdatasync", "fsync", "aof_write", "socket_write")
# how a timeline names an interval switched out inside each call (VT_CALL_* names; "other": none)
BLOCKED_IN = {"fdatasync": "blocked in fdatasync", "fsync": "blocked in fsync", "aof_write": "blocked in AOF write",
              "epoll_wait": "idle (epoll_wait)", "other": "blocked (other)", "socket_write": "blocked in socket write"}
SYNC_CALLS = ("fdatasync", "fsync")


def budget_category(call: str | None, state: str) -> BudgetCategory:
    """The category an off-CPU interval in `call` (a VT_CALL_* name) and `state` belongs to."""
    if state == "runnable":
        return BUDGET_BY_NAME["waiting_for_cpu_pct"]
    for c in BUDGET:
        if call in c.calls:
            return c
    return BUDGET_BY_NAME["other_blocked_pct"]


@dataclass
class CallStats:
    count: int = 0
    p50_us: float | None = None
    p99_us: float | None = None
    max_us: float | None = None
    total_ms: float = 0.0
    bytes: int = 0


@dataclass
class StallSums:
    """The main thread's long off-CPU intervals of one budget class in a cell's windows."""
    count: int = 0
    sum_ms: float = 0.0
    sum_sq_ms2: float = 0.0
    max_ms: float = 0.0


STALL_CLASSES = ("fsync", "aof_write", "cpu_wait", "other_blocked")


@dataclass
class Stalls:
    """The blocked timeline's intervals (each at least threshold_ms) by budget class (STALL_CLASSES)."""
    fsync: StallSums = field(default_factory=StallSums)
    aof_write: StallSums = field(default_factory=StallSums)
    cpu_wait: StallSums = field(default_factory=StallSums)
    other_blocked: StallSums = field(default_factory=StallSums)
    threshold_ms: float = 0.0

    def by_class(self) -> dict[str, StallSums]:
        return {c: getattr(self, c) for c in STALL_CLASSES}


@dataclass
class MainThread:
    wall_ms: float = 0.0
    fdatasync_count: int = 0
    fdatasync_p50_us: float | None = None
    fdatasync_p99_us: float | None = None
    fsync_count: int = 0
    on_cpu_pct: float | None = None
    blocked_in_fsync_pct: float | None = None
    blocked_in_aof_write_pct: float | None = None
    waiting_for_cpu_pct: float | None = None
    idle_pct: float | None = None
    other_blocked_pct: float | None = None
    off_cpu_over_wall_pct: float | None = None  # the off-CPU intervals exceeded the window (scaled)
    sync_on_cpu_pct: float | None = None  # on CPU inside fdatasync/fsync (the call's own work; in on_cpu_pct)
    on_cpu_measured: bool = True
    loop_iterations: int | None = None
    loop_iterations_counted: bool = False
    loop_iteration_p50_us: float | None = None
    loop_iteration_p99_us: float | None = None
    loop_iteration_mean_us: float | None = None
    loop_iterations_sampled: int = 0
    loop_iteration_tw_p50_us: float | None = None
    loop_iterations_per_s: float | None = None
    aof_flushes: int = 0
    aof_flush_p50_us: float | None = None
    off_cpu_ms_by_cause: dict = field(default_factory=dict)
    stalls: Stalls | None = None

    def budget_pct(self, name: str) -> float | None:
        return getattr(self, BUDGET_BY_NAME[name].name)


@dataclass
class ThreadRole:
    role: str
    names: list = field(default_factory=list)
    threads: int = 0
    fdatasync: CallStats = field(default_factory=CallStats)
    fsync: CallStats = field(default_factory=CallStats)
    aof_write: CallStats = field(default_factory=CallStats)
    socket_write: CallStats = field(default_factory=CallStats)
    off_cpu_ms: float = 0.0
    off_cpu_ms_by_state: dict = field(default_factory=dict)
    schedstat: dict | None = None
    wall_ms: float = 0.0
    thread_wall_ms: float = 0.0      # each of its threads over each window it was in
    threads_per_window: float = 0.0
    blocked_in_sync_ms: float = 0.0

    def call(self, name: str) -> CallStats:
        return getattr(self, name)


@dataclass
class Durability:
    """analysis/durability.py: what makes writes durable, from the kernel's timestamps alone."""
    thread: str
    jobs_per_s: float | None = None
    job_ms_p50: float | None = None
    writes_per_job: float | None = None
    arrival_spread_us: float | None = None
    arrival_delay_us: float | None = None
    jobs_waited_per_write: float | None = None
    residence_p50_us: float | None = None  # the median write's arrival to reply (the kernel's timestamps)
    release_hop_p50_us: float | None = None  # the median write's last sync end to its reply (the kernel's)
    durable_wait_p50_us: float | None = None  # the median write's read to that sync's end (the kernel's)
    cohorts: int | None = None
    write_clients: int = 0
    windows: int = 0


@dataclass
class BackendCounts:
    """--backend both: the main thread's fdatasync as each backend counted it."""
    ebpf_count: int
    shim_count: int
    ebpf_p50_us: float | None
    shim_p50_us: float | None
    count_diff_pct: float


@dataclass
class CrossCheck:
    """--backend both: the shim's own view beside eBPF's, and their fdatasync counts."""
    shim_main_thread: MainThread
    shim_threads: list
    fdatasync: BackendCounts


@dataclass
class ServerSummary:
    backend: str | None
    windows: int
    main_thread: MainThread
    threads: list = field(default_factory=list)  # [ThreadRole]
    lost_events: int = 0
    blocked_events: int = 0
    loop_source: str | None = None
    call_source: str | None = None
    untimed: list = field(default_factory=list)
    sampled: dict = field(default_factory=dict)  # call -> the share of its windows it was timed (estimated from it)
    sampled_rse: dict = field(default_factory=dict)  # call -> its estimated count's relative standard error (the largest)
    durability: Durability | None = None
    cross_check: CrossCheck | None = None
    server_exits: int = 0   # windows the server's end cut short (runs[].server_exit)
    sched_traced: bool = True  # every context switch traced (else, record --attach: the kernel's schedstat)

    def role(self, name: str) -> ThreadRole | None:
        return next((t for t in self.threads if t.role == name), None)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        if self.cross_check is None:
            out.pop("cross_check")
        return out
