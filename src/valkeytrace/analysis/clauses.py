"""What an explanation says, as typed clauses (note.Clause: a code and its figures), in the order its
claim says them: the change and how it was judged (the launches' interval, the repeats' rule, or
their paths), the throughput that moved when the latency did not, repeats that disagree, the cause
the accounting names, the model's self-checks, how it chose its loop units, and where the host's
CPUs went and who waited for one. analysis/explain.py decides which are said; reporters/claims.py
holds their sentences. Pure."""
from __future__ import annotations

from dataclasses import dataclass, field

from valkeytrace.analysis import model
from valkeytrace.analysis.facts import littles_law
from valkeytrace.analysis.note import Clause
from valkeytrace.analysis.tables import CellSummary

PLAUSIBLE_SHARE = (0.8, 1.2)  # outside it, the model over- or under-predicts the change


@dataclass
class Change(Clause):
    """'GET p50 1.00 ms -> 2.00 ms (+100%):' the head of a compare's claim."""
    CODE = "change"
    op: str
    metric: str
    base: float
    cand: float


@dataclass
class Significance(Clause):
    """The repeats' rule: kind significance.repeats / significance.none / significance.unknown."""
    kind: str
    n: list


def significance(sig: bool | None, n_base: int, n_cand: int) -> Significance:
    return Significance({None: "significance.unknown", False: "significance.none"}.get(sig, "significance.repeats"),
                        [n_base, n_cand])


@dataclass
class LaunchJudgement(Clause):
    """The launches' rule: the change of their means and its 95% interval."""
    CODE = "significance.launches"
    change_pct: float
    interval_pct: list
    launches: list
    significant: bool | None = None


@dataclass
class Paths(Clause):
    """A p50 whose repeats lie on different paths of the server: no significance from one launch."""
    CODE = "significance.paths"
    paths: list
    n: list
    labels: list = field(default_factory=list)


def paths(row_base, row_cand, labels: tuple[str, str]) -> Paths:
    return Paths([list(row_base.paths), list(row_cand.paths)], [row_base.n, row_cand.n], list(labels))


@dataclass
class HostSide:
    label: str
    host_cores: float | None
    cpus: int | None
    parts: list        # [(who, cores)] in CPU_PARTS' order


@dataclass
class HostCpu(Clause):
    """Where the host's CPUs went on each side, and what took more of them (grew: who -> + cores)."""
    CODE = "host_cpu"
    grew: dict
    sides: list = field(default_factory=list)


CPU_PARTS = (("server_cores", "the server"), ("clients_cores", "the benchmark clients"),
             ("tracer_cores", "valkeytrace"), ("other_cores", "other processes"))


def host_cpu(b: CellSummary, c: CellSummary, base_label: str, cand_label: str) -> HostCpu | None:
    hb, hc = b.host_cpu, c.host_cpu
    if not hb or not hc:
        return None
    moved = [(getattr(hc, k) - getattr(hb, k), name) for k, name in CPU_PARTS
             if getattr(hb, k) is not None and getattr(hc, k) is not None]
    sides = [HostSide(label, h.host_cores, h.cpus, [(name, getattr(h, k)) for k, name in CPU_PARTS
                                                     if getattr(h, k) is not None])
             for label, h in ((base_label, hb), (cand_label, hc))]
    return HostCpu({name: round(d, 2) for d, name in moved if d >= 0.1}, sides)


@dataclass
class CpuWait(Clause):
    """Who waited for a CPU on each side (% of the window: the main thread; of their own time: the
    clients) and on whom the contention landed, when it grew by WAIT_LANDED_POINTS or more."""
    CODE = "cpu_wait"
    waits: dict
    landed_on: str | None
    points: float


WAIT_LANDED_POINTS = 5.0  # a CPU-wait share that grew by this many points says where contention landed


def clients(cell: CellSummary, role: str) -> str | None:
    """'the GET clients' (measured) or 'the background SET clients' of a cell, None without."""
    op = next((o.op for o in cell.ops.values() if o.role == role), None)
    return None if op is None else f"the {'background ' if role == 'background' else ''}{op} clients"


def cpu_wait(b: CellSummary, c: CellSummary) -> CpuWait | None:
    """On a host short of CPUs the same contention lands on the main thread (it delays every
    request) or on the clients (it cuts how many requests they keep in flight). None when only the
    server's side is known (it is in the budget already)."""
    who_wait = []
    mb = b.server.main_thread.waiting_for_cpu_pct if b.server else None
    mc = c.server.main_thread.waiting_for_cpu_pct if c.server else None
    if mb is not None and mc is not None:
        who_wait.append(("the main thread", mb, mc))
    for key, role in (("measured_client_wait", "measured"), ("background_client_wait", "background")):
        xb, xc, who = getattr(b.host_cpu, key, None), getattr(c.host_cpu, key, None), clients(b, role)
        if xb is not None and xc is not None and who:
            who_wait.append((who, 100 * xb, 100 * xc))
    if len(who_wait) < 2:
        return None
    grew = max(who_wait, key=lambda w: w[2] - w[1])
    landed = grew[2] - grew[1] >= WAIT_LANDED_POINTS
    return CpuWait({who: [round(x, 1), round(y, 1)] for who, x, y in who_wait},
                   grew[0] if landed else None, round(grew[2] - grew[1], 1))


@dataclass
class ThroughputMoved(Clause):
    """The latency did not move but the op's throughput did: the mean, and the clients in flight."""
    CODE = "throughput_moved"
    tps: list
    mean_us: list
    op: str = ""
    in_flight: list | None = None
    clients: int | None = None


TPS = "tps"


def throughput(op: str, row, b: CellSummary, c: CellSummary) -> ThroughputMoved | None:
    if row.significant[TPS] is not True:
        return None
    lb, lc = littles_law(b).get(op), littles_law(c).get(op)
    return ThroughputMoved([row.base.median.tps or 0.0, row.cand.median.tps or 0.0],
                           [row.base.median.mean_us, row.cand.median.mean_us], op,
                           [lb.in_flight, lc.in_flight] if lb and lc else None, lc.clients if lb and lc else None)


@dataclass
class RepeatWait:
    p50_us: float
    main_pct: float
    clients_wait: float


@dataclass
class SideRepeats:
    """One side's repeats, each with its p50 and who waited for a CPU in it."""
    label: str
    clients: str
    repeats: list      # [RepeatWait]


@dataclass
class Spread(Clause):
    """A side whose repeats disagree (max / min above SPREAD_RATIO): the median of a few can land in
    either mode (spread: label -> [lo, hi]); per_repeat: who waited for a CPU in each."""
    CODE = "repeats_disagree"
    spread: dict
    per_repeat: bool
    name: str = ""
    n: list = field(default_factory=list)
    waiting: list = field(default_factory=list)    # [SideRepeats]


SPREAD_RATIO = 1.5


def spread(name: str, metric: str, row_base, row_cand, labels: tuple[str, str], cells: tuple = (None, None)) -> Spread | None:
    who, waiting = {}, []
    for label, row, cell in ((labels[0], row_base, cells[0]), (labels[1], row_cand, cells[1])):
        lo_hi = row.spread.get(metric)
        if row.n >= 2 and lo_hi and lo_hi[0] > 0 and lo_hi[1] / lo_hi[0] > SPREAD_RATIO:
            who[label] = [lo_hi[0], lo_hi[1]]
            if cell is not None and metric == "p50_us":
                per = repeats_waiting(label, cell, row.op)
                if per:
                    waiting.append(per)
    if not who:
        return None
    return Spread(who, bool(waiting), name, [row_base.n, row_cand.n], waiting)


def repeats_waiting(label: str, cell: CellSummary, op: str) -> SideRepeats | None:
    rows = [r for r in cell.per_repeat if r.p50_us.get(op) is not None
            and r.main_cpu_wait_pct is not None and r.measured_client_wait is not None]
    who = clients(cell, "measured")
    if len(rows) < 2 or not who:
        return None
    return SideRepeats(label, who.removeprefix("the "),
                       [RepeatWait(r.p50_us[op], r.main_cpu_wait_pct or 0, r.measured_client_wait or 0) for r in rows])


@dataclass
class Cause(Clause):
    """What the accounting names: kind cause.leading (no share), cause.fsync or cause.not_fsync;
    components and deltas: the one or two that lead; rest: the next two beside an under-prediction."""
    kind: str
    components: list
    share: float | None = None
    fit: str | None = None
    deltas: list = field(default_factory=list)
    offload: bool = False
    rest: list = field(default_factory=list)      # [(component, delta_us)]


def cause(comps: list[model.Contribution], observed: float, share: float | None) -> Cause:
    lead = model.leading(comps, observed)
    top = [c for c in lead[:2] if abs(c.delta_us) >= 0.05 * abs(observed)] or lead[:1]
    names, deltas = [c.name for c in top], [c.delta_us for c in top]
    if share is None:
        return Cause("cause.leading", names, deltas=deltas)
    fsync_led = lead[0].name in model.DURABILITY and share >= 0.5
    lo, hi = PLAUSIBLE_SHARE
    return Cause("cause.fsync" if fsync_led else "cause.not_fsync", names, share,
                 "over" if fsync_led and share > hi else "under" if fsync_led and share < lo else "plausible",
                 deltas, any(c.name == "offload_wait" and c.delta_us for c in comps),
                 [(c.name, c.delta_us) for c in lead[1:3]])


@dataclass
class ServerShare(Clause):
    CODE = "server_share"
    share: float


@dataclass
class Accounting(Clause):
    """Each component's contribution to the change (µs, signed)."""
    CODE = "accounting"
    deltas: list       # [(component, delta_us)]


def accounting(comps: list[model.Contribution]) -> Accounting:
    return Accounting([(c.name, c.delta_us) for c in comps])


@dataclass
class UsedUnits:
    name: str                  # 'repeat 2', 'launch 1 repeat 2'
    p50_us: float
    iterations: model.RequestIterations


@dataclass
class SideUnits:
    label: str
    used: list                 # [UsedUnits]: one, or the two whose median the side's p50 is


@dataclass
class LoopUnits(Clause):
    """How the model chose each side's loop units per request (model.RequestIterations)."""
    CODE = "loop_units"
    sides: list                # [SideUnits]


def run_name(u: model.UsedRepeat) -> str:
    """A run as the report names it: its repeat, and its launch in an interleaved recording
    (compare's: each launch repeats from 1)."""
    if u.launch is None:
        return f"repeat {u.repeat}"
    return f"launch {u.launch}" + (f" repeat {u.repeat}" if (u.repeat or 1) > 1 else "")


def side_units(label: str, side: model.Side) -> SideUnits:
    used = sorted(side.used, key=lambda u: (u.launch or 0, u.repeat or 0))
    return SideUnits(label, [UsedUnits(run_name(u), u.p50_us, u.request_iterations) for u in used])


@dataclass
class IoThreads(Clause):
    CODE = "model_check.io_threads"
    io_threads: int
    k: float


@dataclass
class Intervention(Clause):
    """The intervention's slope (ms of p50 per extra ms of main-thread fsync) against the model's k."""
    CODE = "model_check.intervention"
    slope: float
    r2: float
    k: float
    agrees: str        # "agrees", "under" or "over"
    op: str = ""


@dataclass
class ModelCheck(Clause):
    """The model's assumptions against what the recording measured (label: the side, in a compare)."""
    CODE = "model_check"
    checks: list       # [IoThreads | Intervention]
    label: str | None = None


@dataclass
class TailNotModelled(Clause):
    CODE = "tail.not_modelled"
    metric: str
    fsync_p99_us: list


@dataclass
class NotModelled(Clause):
    CODE = "not_modelled"
    reason: str        # model.unmodelled_reason's code


@dataclass
class RunHead(Clause):
    """'GET p50 1.00 ms.' the head of one recording's claim."""
    CODE = "p50"
    op: str
    p50_us: float


@dataclass
class Parts(Clause):
    """One recording's p50 by component (µs); over: the server-side terms exceed the latency."""
    CODE = "parts"
    parts: list        # [(component, us)]
    over: bool = False


@dataclass
class GroupCommit(Clause):
    CODE = "group_commit"
    tps: list
    sets_per_fsync: list


@dataclass
class NoServerTrace(Clause):
    CODE = "no_server_trace"
