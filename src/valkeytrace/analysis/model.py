"""The latency model: what part of a client latency the server's main thread accounts for, by
cause, and what is left outside the server (docs/explain.md). Pure functions over analysed cells.

A request waits for the main thread's event loop: it is read by the first iteration whose poll
(epoll_wait) comes after it arrived, executed, and answered at the end of that iteration, in
beforeSleep, after the AOF is written (and, with appendfsync always, fdatasync'd on the main
thread). Closed-loop clients send their next request right after a reply, so whether it makes
the main thread's next poll is a race: a request that does is answered one loop unit after its
client's previous reply; one that comes in after that poll waits the unit out and is answered at
the end of the next: 2 units. With I/O threads there is one hop more (the query is read by an
I/O thread between two of the main thread's iterations and executed at a later beforeSleep):
2 or 3.

The unit (loop_cycle()) is what a request waits out. When the main thread fsyncs as part of its
loop (appendfsync always: MIN_FSYNC_CYCLES_PER_S or more), it is the fsync cycle: one
fsync-carrying iteration and the iterations without one that ran before the next (an iteration
that executed no write has nothing to fsync; it answers its reads at once, but a request that
comes in meanwhile still waits for the next fsync). Otherwise it is one iteration, and the few
main-thread fsyncs there are (at an AOF's opening or rotation, even under everysec) are stalls
like the others below. From the window's measured totals:
  I   iterations (INFO eventloop_cycles, or the shim's count of epoll_wait returns)
  n_f main-thread fdatasync/fsync calls (n_f <= I): the number of fsync cycles when regular
  U   units: n_f when the fsyncs are regular, else I
  per unit: F = fsync time / U, and each busy cause c (on CPU, waiting for a CPU, blocked in an
      AOF write, other blocked) c / U

Stalls weighed as requests meet them (stall_components()): spreading a cause's time evenly over
the units is right for work every request goes through and for stalls short beside a unit, not
for rare long ones. The main thread's blocked timeline holds every off-CPU part at least its
threshold (100 µs) long; those of an interruption (a wait for a CPU, an AOF write, any other
block, and main-thread fsyncs that are not the loop's cycle) are taken out of the spread and
weighed by who meets them. A stall holds every request in flight: with N closed-loop clients of
the op, n stalls in the window and R requests answered in it, a share q = min(1, N n / R) of the
requests met one and waited it out (its mean length W each: N W n / R per request on average, what
Little's law says). The median request: when q >= 1/2 it met one, W; otherwise the requests that
met one sit above the median, which moves up the quick requests' distribution from its own median
to the whole distribution's: Q(1/2) - Q((1 - q) / 2), read from the client's latency
distribution, shared among the kinds of stall by their q. A few 5 ms fsyncs in 2 s weigh
microseconds; a busy loop that takes the main thread's CPU in slices of milliseconds weighs what it
moves the median. Without a timeline (the shim) or a latency distribution, stalls stay spread.

Which of the two paths a typical request takes is measured, not assumed (request_iterations()):
the op's mean latency (the benchmark client's) in units is c = mean / unit. A request takes
K - 1 or K units (K = 2, 3 with I/O threads), so a share clamp(K - c, 0, 1) of them took the
shorter path; the median request takes the path of the majority: k = K - 1 when that share is a
half or more, else K. (c above K: time outside the server on top; every request is then taken to
wait K.) So the model predicts the median from the mean through this two-path structure, and the
p50 checks it: when the p50 itself, u = p50 / unit, lies between the paths (K - 1 < u < K) and
more than VALLEY units from the mean's k, the mean is contradicted, and k = u: the median request
came in during a unit, waited its rest and then the next. Measured so: closed-loop clients on a
2-CPU host gave three modes, a fifth of the GETs answered at once by an iteration that executed
no write, others after one fsync cycle, others after two, with the p50 in the valley between 1 and
2 cycles (1.47 and 1.62) and the mean (1.21, 1.30), pulled down by the quick fifth, picking 1.
A third path, measured on this VM (1 run in 4 at always +4 ms, GET c=50 beside SET c=8): the
median GET answered well within one fsync cycle (~0.3 ms of a 5 ms cycle), by iterations that
executed no write (the GET clients got their turn on their CPU before the SET clients, so the
main thread's next iterations held GETs only: nothing to fsync). When the p50 is under K - 1 -
VALLEY units, the median request waited no fsync cycle: it is modelled as K plain iterations
(quick = True: no fsync, each busy cause per iteration), the rest outside the server.
Each repeat is modelled on its own (median_repeat()).

  per request:  fsync = k F (+ its residual when not the cycle);  each busy cause c = k c / U
                (+ its residual, but for on CPU)
  outside_server = L - (fsync + aof_write + cpu_wait + on_cpu + other_blocked)
the client, the network, and the host's CPU taken by the clients. It is negative when the
server-side terms over-predict L. Components add up to L exactly, on each side, so the
contributions to a change add up to the change.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from valkeytrace.analysis.summary import BUDGET, ServerSummary
from valkeytrace.recording.model import decode

VALLEY = 0.25  # a p50 between the paths this far (in units) from the mean's path contradicts it
MIN_FSYNC_CYCLES_PER_S = 10.0  # main-thread fsyncs this frequent are the loop's cycle; rarer ones are stalls
ITERATIONS_PER_REQUEST = 2.0
ITERATIONS_PER_REQUEST_IO_THREADS = 3.0
COMPONENTS = ("fsync", "aof_write", "cpu_wait", "on_cpu", "other_blocked", "offload_wait", "outside_server")
# under I/O threads, where the kernel timed each write (write-only windows): the rest of its time in the
# server beyond the main thread's loop units (the I/O threads' hop); present only there
IO_HOP = "io_hop"
SERVER_COMPONENTS = COMPONENTS[:-1] + (IO_HOP,)
# offload_wait: a reply held until its batch is durable, the write + fdatasync on the offload thread
# (a durable offload: the virtual one, record --emulate-offload durable, or #3381's)
DURABILITY = ("fsync", "aof_write", "offload_wait")
LABELS = {"fsync": "main thread blocked in fsync", "aof_write": "main thread blocked in an AOF write",
          "cpu_wait": "main thread waiting for a CPU", "on_cpu": "main thread on CPU",
          "other_blocked": "main thread blocked elsewhere",
          "offload_wait": "waiting for its batch's write + fdatasync off the main thread",
          IO_HOP: "a durable reply's hop to its socket (the I/O threads', from the kernel's timestamps)",
          "outside_server": "outside the server (client, network, the host's CPU taken by the clients)"}
# the main thread's busy components by the budget category that measures them (analysis/summary.py)
_BUDGET = {c.component: c.name for c in BUDGET if c.component and c.component != "fsync"}
_FSYNC = next(c.name for c in BUDGET if c.component == "fsync")


def unmodelled_reason(server: ServerSummary | None) -> str | None:
    """Why a cell's server side cannot be modelled, as a code (None when it can): no_server_trace,
    no_window, no_loop_count (no INFO eventloop_cycles and only a sample of iterations seen) or
    no_budget (no main-thread time budget); reporters/claims.py says them."""
    if not server:
        return "no_server_trace"
    m = server.main_thread
    if not m.wall_ms:
        return "no_window"
    if not m.loop_iterations or not m.loop_iterations_counted:
        return "no_loop_count"
    if m.on_cpu_pct is None:
        return "no_budget"
    return None


def max_iterations(doc) -> float:
    """K: the iterations a request that misses the main thread's next poll spends in the server
    for the recording's server (I/O threads: one more)."""
    io = decode(doc).server.io_threads or 1
    return ITERATIONS_PER_REQUEST_IO_THREADS if io > 1 else ITERATIONS_PER_REQUEST


@dataclass
class LoopCycle:
    """The unit a request waits out, and what fills it: per unit, the fsync time and each busy cause's
    time (µs); the long stalls weighed apart ({component: StallSums})."""
    unit: str                     # "fsync cycle" or "iteration"
    iterations: float
    main_fsyncs: float
    units: float
    fsync_us: float
    busy_us: dict                 # component -> µs a unit
    stalls: dict                  # component -> StallSums
    duration_us: float


def loop_cycle(server: ServerSummary, spread_stalls: bool = True) -> LoopCycle:
    """The unit a request waits out (module docstring): the fsync cycle when the main thread
    fsyncs as part of its loop, else one iteration; per unit, the fsync time and each busy cause's
    time (µs), without the long stalls of an interruption unless spread_stalls; and those stalls
    (the blocked timeline's)."""
    m = server.main_thread
    wall_us = m.wall_ms * 1000.0
    iters = float(m.loop_iterations or 0)
    n_f = float(min((m.fdatasync_count or 0) + (m.fsync_count or 0), iters))
    regular = bool(n_f) and wall_us > 0 and n_f / (wall_us / 1e6) >= MIN_FSYNC_CYCLES_PER_S
    units = n_f if regular else iters
    fsync_total = wall_us * (getattr(m, _FSYNC) or 0) / 100.0
    busy = {c: wall_us * (getattr(m, k) or 0) / 100.0 for c, k in _BUDGET.items()}
    # the sync calls' own CPU is fsync time too (the budget counts it on CPU)
    own = min(busy["on_cpu"], wall_us * (m.sync_on_cpu_pct or 0) / 100.0)
    fsync_total += own
    busy["on_cpu"] -= own
    stalls = {} if spread_stalls or not m.stalls else {
        c: st for c, st in m.stalls.by_class().items() if c in STALLS and st.count and not (c == "fsync" and regular)}
    for c, st in stalls.items():
        if c == "fsync":
            fsync_total = max(0.0, fsync_total - st.sum_ms * 1000.0)
        else:
            busy[c] = max(0.0, busy[c] - st.sum_ms * 1000.0)
    fsync_us = fsync_total / units if units else 0.0
    busy_us = {c: v / units for c, v in busy.items()} if units else dict.fromkeys(busy, 0.0)
    return LoopCycle("fsync cycle" if regular else "iteration", iters, n_f, units, fsync_us, busy_us, stalls,
                     fsync_us + sum(busy_us.values()))


STALLS = ("fsync", "aof_write", "cpu_wait", "other_blocked")  # interruptions the timeline weighs


def plain_iterations(cyc: LoopCycle) -> LoopCycle:
    """The loop in iterations without their fsync: what a request answered by an iteration that
    executed no write waits (request_iterations' quick path)."""
    scale = cyc.units / cyc.iterations if cyc.iterations else 0.0
    busy = {c: v * scale for c, v in cyc.busy_us.items()}
    return replace(cyc, unit="iteration", units=cyc.iterations, fsync_us=0.0, busy_us=busy,
                   stalls={c: st for c, st in cyc.stalls.items() if c != "fsync"}, duration_us=sum(busy.values()))


def quantile(cdf: list, pct: float) -> float | None:
    """The latency (µs) at pct percent of requests, interpolated in a client's distribution
    [(µs, percent at or below)] (tables.latency_cdf); None without one."""
    pts = sorted(cdf)
    if not pts or pts[0][1] > 0:
        pts = [(0.0, 0.0)] + pts
    pts = [p for i, p in enumerate(pts) if p[1] > 0 or i + 1 == len(pts) or pts[i + 1][1] > 0]  # the last at 0%
    if len(pts) < 2 or pct > pts[-1][1]:
        return None
    for (x0, p0), (x1, p1) in zip(pts, pts[1:]):
        if p1 >= pct:
            return x1 if p1 == p0 else x0 + (x1 - x0) * (pct - p0) / (p1 - p0)
    return None


@dataclass
class Met:
    """The part of the median request's latency the long stalls account for, and how it was weighed."""
    components: dict              # component -> µs
    met_share: float | None = None
    how: str | None = None        # "met", "above the median", or None (not weighed)


def stall_components(stalls: dict, wall_ms: float, meet) -> Met:
    """{component: µs} of the median request's latency that the long stalls account for, and how
    (module docstring). meet: the op's clients, TPS and latency distribution (tables.Meet); None
    without it."""
    if not stalls or not meet or not meet.clients or not meet.tps or not wall_ms:
        return Met({})
    requests = meet.tps * wall_ms / 1000.0
    q = {c: min(1.0, meet.clients * st.count / requests) for c, st in stalls.items()}
    total = min(1.0, sum(q.values()))
    if total >= 0.5:
        return Met({c: 1000.0 * st.sum_ms / st.count * q[c] / total for c, st in stalls.items()}, round(total, 3), "met")
    hi, lo = quantile(meet.cdf or [], 50.0), quantile(meet.cdf or [], 50.0 * (1 - total))
    if hi is None or lo is None:
        return Met({}, round(total, 3))
    shift = max(0.0, hi - lo)
    return Met({c: shift * q[c] / total for c in stalls} if total else {}, round(total, 3), "above the median")


@dataclass
class RequestIterations:
    """k, the loop units the median request spends in the server, and what it was made of."""
    k: float
    most: float
    quick: bool = False
    unit: str | None = None
    mean_in_units: float | None = None
    shorter_path_share: float | None = None
    p50_in_units: float | None = None
    unit_us: float | None = None
    mean_latency_us: float | None = None
    mean_k: float | None = None
    source: str | None = None     # "mean", "p50" or "kernel" (JSON: "from")

    def to_json(self) -> dict:
        out = asdict(self)
        out["from"] = out.pop("source")
        return out


def request_iterations(server: ServerSummary, mean_us: float | None, most: float = ITERATIONS_PER_REQUEST,
                       p50_us: float | None = None) -> RequestIterations:
    """k, the loop units the median request spends in the server (module docstring), with what it
    was made of: the mean's path, or the p50's own position between the paths when the p50
    contradicts it (or there is no mean)."""
    cyc = loop_cycle(server) if server.main_thread.loop_iterations else None
    unit = cyc.duration_us if cyc else None
    out = RequestIterations(k=most, most=most, unit=cyc.unit if cyc else None,
                            unit_us=round(unit, 1) if unit else unit, mean_latency_us=mean_us)
    if not unit or cyc is None:
        return out
    if mean_us:
        c = mean_us / unit
        shorter = min(1.0, max(0.0, most - c))
        k = most - 1 if shorter >= 0.5 else most
        out.k, out.mean_k, out.mean_in_units, out.shorter_path_share, out.source = k, k, round(c, 3), round(shorter, 3), "mean"
    if p50_us:
        u = p50_us / unit
        out.p50_in_units = round(u, 3)
        if cyc.unit == "fsync cycle" and u < most - 1 - VALLEY:
            out.k, out.quick, out.source = most, True, "p50"  # no fsync cycle: K plain iterations
        elif not mean_us or (most - 1 < u < most and abs(u - out.k) > VALLEY):
            out.k, out.source = round(min(most, max(most - 1, u)), 3), "p50"
    d = server.durability
    if d is not None and d.thread == "main" and d.jobs_waited_per_write and cyc.unit == "fsync cycle":
        # a write-only window times each request (eBPF): the fsync cycles each write waited, from its
        # arrival to its reply, are counted, not inferred (three cohorts under two I/O threads: 3.2)
        out.k, out.quick, out.source = round(d.jobs_waited_per_write, 3), False, "kernel"
    return out


@dataclass
class Residence:
    """The main thread's part of one request's latency by component (SERVER_COMPONENTS, and
    outside_server once decompose() adds it), and the inputs used (JSON: evidence.model_inputs)."""
    components: dict
    inputs: dict


def server_residence(server: ServerSummary, k: float = ITERATIONS_PER_REQUEST, meet=None,
                     quick: bool = False) -> Residence:
    """{component: µs} of the main thread's part of one request's latency (SERVER_COMPONENTS):
    k loop units, each split by cause, and the long stalls as the median request met them (meet:
    the op's clients, TPS and latency distribution; without it they are spread too); and the
    inputs used. quick: the request waited no fsync cycle (request_iterations): k plain
    iterations, no fsync."""
    cyc = loop_cycle(server, spread_stalls=not meet)
    if quick:
        cyc = plain_iterations(cyc)
    met = stall_components(cyc.stalls, server.main_thread.wall_ms, meet)
    if cyc.stalls and not met.how:  # no way to weigh them: spread, as before
        cyc, met = loop_cycle(server), Met({})
        if quick:
            cyc = plain_iterations(cyc)
    res = met.components
    comps = {c: k * v + res.get(c, 0.0) for c, v in (("fsync", cyc.fsync_us), *cyc.busy_us.items())}
    comps["offload_wait"] = 0.0
    return Residence(comps, {
        "iterations": cyc.iterations, "main_fsyncs": cyc.main_fsyncs, "unit": cyc.unit,
        "unit_us": cyc.duration_us, "fsync_per_unit_us": cyc.fsync_us, "busy_per_unit_us": sum(cyc.busy_us.values()),
        "units_per_request": k,
        "stalls": {c: {"count": st.count, "mean_ms": round(st.sum_ms / st.count, 3),
                       "per_request_us": round(res.get(c, 0.0), 1)} for c, st in cyc.stalls.items()},
        "stalls_met_share": met.met_share, "stalls_weighed": met.how, "wall_ms": server.main_thread.wall_ms})


def decompose(latency_us: float, server: ServerSummary, k: float = ITERATIONS_PER_REQUEST, meet=None,
              quick: bool = False) -> Residence:
    """Components of latency_us (summing to it exactly): SERVER_COMPONENTS + outside_server."""
    res = server_residence(server, k, meet, quick)
    res.components["outside_server"] = latency_us - sum(res.components.values())
    return res


@dataclass
class RepeatInput:
    """One repeat's op as the side's model takes it: its p50 and mean, its server summary, and how
    the op's requests meet the long stalls (tables.Meet; None: spread them)."""
    repeat: int | None
    launch: int | None
    p50: float
    mean: float | None
    server: ServerSummary
    meet: object | None = None


@dataclass
class UsedRepeat:
    """A repeat the side's p50 was modelled from."""
    repeat: int | None
    launch: int | None
    p50_us: float
    request_iterations: RequestIterations
    components: dict
    inputs: dict


@dataclass
class Side:
    """One side's p50, modelled: its components (adding up to the p50), k, the repeat(s) it came from."""
    components: dict
    k: float
    used: list                    # [UsedRepeat]
    residence_us: float | None = None  # under I/O threads: the kernel's median write arrival-to-reply


def median_repeat(repeats: list, most: float = ITERATIONS_PER_REQUEST) -> Side:
    """One side's p50, modelled. repeats: tables.RepeatDetail (or the pooled repeats as one), with a
    p50, a mean and a server summary each. The side's p50 is the median of the repeats' p50s: the
    middle repeat's, or the mean of the middle two; so its components are that repeat's (the mean of
    those two's), each repeat decomposed with its own server figures and its own k. They add up to
    the side's p50 exactly, and two repeats on different paths (a 5 ms and an 11 ms p50 at 2 vs 2)
    are not modelled as one path from their pooled mean."""
    reps = sorted(repeats, key=lambda r: r.p50)
    n = len(reps)
    used = []
    for r in reps[(n - 1) // 2: n // 2 + 1]:
        it = request_iterations(r.server, r.mean, most, r.p50)
        res = decompose(r.p50, r.server, it.k, r.meet, it.quick)
        used.append(UsedRepeat(r.repeat, r.launch, r.p50, it, res.components, res.inputs))
    return Side({c: sum(u.components.get(c, 0.0) for u in used) / len(used) for c in names(u.components for u in used)},
                sum(u.request_iterations.k for u in used) / len(used), used)


@dataclass
class Contribution:
    """A component on each side and its part of the change (JSON: compare.explanation[].components)."""
    name: str
    base_us: float
    cand_us: float
    delta_us: float


def contributions(b: dict, c: dict) -> list[Contribution]:
    """Each component on each side (b, c: {component: µs}, each adding up to its side's latency) and
    its contribution to the change (the deltas sum to the change)."""
    return [Contribution(n, round(b.get(n, 0.0), 1), round(c.get(n, 0.0), 1), round(c.get(n, 0.0) - b.get(n, 0.0), 1))
            for n in names((b, c))]


def names(sides) -> tuple[str, ...]:
    """COMPONENTS, and the I/O threads' hop where a side has it."""
    return COMPONENTS + ((IO_HOP,) if any(IO_HOP in s for s in sides) else ())


def durability_share(comps: list[Contribution], observed_us: float) -> float | None:
    """(fsync + AOF-write contribution) / observed change: unclamped; None when nothing changed."""
    if not observed_us:
        return None
    return sum(c.delta_us for c in comps if c.name in DURABILITY) / observed_us


def server_share(comps: list[Contribution], observed_us: float) -> float | None:
    """The server's part of the change (every component but outside_server) over the observed change."""
    if not observed_us:
        return None
    return sum(c.delta_us for c in comps if c.name in SERVER_COMPONENTS) / observed_us


def leading(comps: list[Contribution], observed_us: float) -> list[Contribution]:
    """The components that drove the change: those moving with it, largest first (all of them,
    by size, when none does)."""
    sign = 1 if observed_us >= 0 else -1
    along = [c for c in comps if c.delta_us * sign > 0]
    return sorted(along or comps, key=lambda c: -abs(c.delta_us))
