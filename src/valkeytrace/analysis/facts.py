"""The facts the explanation stands on, each read off one side's analysed cell: where the fsyncs
ran and what the main thread did (the clause every claim quotes), Little's law, the caveats a
cell carries, SETs per fsync, durability, the SET's mechanism and the server's own view (INFO
latencystats). Typed records (note.Clause); reporters/claims.py says them. Pure.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field

from valkeytrace.analysis import offload
from valkeytrace.analysis.note import Clause
from valkeytrace.analysis.summary import MainThread, ServerSummary
from valkeytrace.analysis.tables import MEASURED_OP, CellSummary
from valkeytrace.recording.model import Document, Run, decode, decode_as

IN_FLIGHT_MS = 1.0  # a role blocked this long inside fsync with no call completed carries one in flight


@dataclass
class Placement:
    """A thread role that made fdatasync/fsync calls (or was blocked inside one that did not complete)."""
    role: str
    count: int
    per_s: float | None
    p50_us: float | None
    blocked_ms: float | None = None
    in_flight: bool = False

    def to_json(self) -> dict:
        out = asdict(self)
        if not self.in_flight:
            del out["blocked_ms"], out["in_flight"]
        return out


def fsync_placement(server: ServerSummary) -> list[Placement]:
    """Which thread roles made fdatasync/fsync calls, with counts and rates; a role that completed
    none but was blocked inside one (an fsync longer than the window, on a slow disk) too, with
    count 0 and blocked_ms."""
    wall_s = (server.main_thread.wall_ms or 0) / 1000.0
    out = []
    for t in server.threads:
        n = t.fdatasync.count + t.fsync.count
        if n:
            p50 = t.fdatasync.p50_us if t.fdatasync.count else t.fsync.p50_us
            out.append(Placement(t.role, n, n / wall_s if wall_s else None, p50))
        elif (t.blocked_in_sync_ms or 0) >= IN_FLIGHT_MS:
            out.append(Placement(t.role, 0, 0.0, None, t.blocked_in_sync_ms, True))
    return sorted(out, key=lambda x: (-x.count, -(x.blocked_ms or 0)))


@dataclass
class LittlesLaw:
    """TPS x mean latency against the number of closed-loop clients of an op."""
    tps: float
    mean_us: float
    clients: int
    in_flight: float
    ratio: float


def littles_law(cell: CellSummary) -> dict[str, LittlesLaw]:
    """TPS x mean latency against the number of clients, per measured op (closed-loop clients)."""
    out = {}
    for op, o in cell.ops.items():
        mean, tps = o.median.mean_us, o.median.tps
        if tps and mean and o.clients and not o.median.offered_rate:  # an open loop has no fixed clients
            in_flight = tps * mean / 1e6
            out[op] = LittlesLaw(tps, mean, o.clients, in_flight, in_flight / o.clients)
    return out


@dataclass
class Where(Clause):
    """One side's facts: where the fsyncs ran (placements) and what the main thread did (and, given
    a latency, how many time-weighted loop iterations it spans); no_server: no server figures."""
    CODE = "side.where"
    label: str
    placements: list = field(default_factory=list)     # [Placement]
    blocked_in_fsync_pct: float = 0.0
    loop_tw_p50_us: float | None = None
    latency_us: float | None = None
    loop_iterations_per_s: float | None = None          # counted iterations only
    loop_iteration_mean_us: float | None = None
    waiting_for_cpu_pct: float | None = None
    no_server: bool = False


def where(label: str, server: ServerSummary | None, latency_us: float | None = None) -> Where:
    if server is None:
        return Where(label, no_server=True)
    m = server.main_thread
    counted = bool(m.loop_iteration_mean_us and m.loop_iterations_per_s and m.loop_iterations_counted)
    return Where(label, fsync_placement(server), m.blocked_in_fsync_pct or 0, m.loop_iteration_tw_p50_us,
                 latency_us, m.loop_iterations_per_s if counted else None,
                 m.loop_iteration_mean_us if counted else None, m.waiting_for_cpu_pct)


STEAL_CAVEAT = 0.01  # the hypervisor's steal on the server's CPUs above this share of the window gets a caveat
CLIENT_WAIT_CAVEAT = 0.2  # a measuring client waiting this share of its time for a CPU gets a caveat


def shared_client_cpus(cell: CellSummary, doc) -> list[int] | None:
    """The CPUs the cell's two client processes (read-heavy: GET measured, SET behind) were placed
    on when fewer than the processes (record --client-cpus), else None."""
    cpus = decode(doc).client.placement.client_cpus
    if not cpus or cell.workload != "read-heavy" or len(cpus) >= len(cell.ops):
        return None
    return list(cpus)


@dataclass
class Caveat(Clause):
    """A caveat as a record: its stable code (finding), the side it is said of (label; None: both or
    neither) and its figures (the subclass's fields); reporters/claims.py says it."""
    label: str | None

    @property
    def finding(self) -> str:
        return self.code

    def said(self, text: str) -> str:
        """The caveat as a report lists it, given its words: 'label: text'."""
        return f"{self.label}: {text}" if self.label else text


@dataclass
class Emulation(Caveat):
    CODE = "emulation"
    description: str


@dataclass
class ClientsSharedCpu(Caveat):
    CODE = "clients_shared_cpu"
    cpus: list


@dataclass
class ClientsWaitedCpu(Caveat):
    CODE = "clients_waited_cpu"
    op: str
    waited: float


@dataclass
class LittlesLawInconsistent(Caveat):
    CODE = "littles_law_inconsistent"
    op: str
    in_flight: float
    clients: int


@dataclass
class InFlight:
    op: str
    in_flight: float
    clients: int
    waited: float | None


@dataclass
class ClientsOwnTime(Caveat):
    """Ops whose clients kept fewer requests in flight than their number (TPS x mean latency)."""
    CODE = "clients_own_time"
    low: list          # [InFlight]
    held: bool         # one of them waited for a CPU CLIENT_WAIT_CAVEAT of its time or more
    unknown: bool      # no client CPU figures at all


@dataclass
class HypervisorSteal(Caveat):
    CODE = "hypervisor_steal"
    over: float        # the share of the window's server CPU time the steal exceeded


@dataclass
class MainCpuBound(Caveat):
    CODE = "main_cpu_bound"
    waiting_pct: float


@dataclass
class DurabilityDiffers(Caveat):
    """One side acknowledges SETs before their fsync (loose), the other after."""
    CODE = "durability_differs"
    loose: str
    appendfsync: str | None


def caveats(cells: list[CellSummary], docs: list) -> list[Caveat]:
    """The caveats of cells (one a side), as records."""
    out: list[Caveat] = []
    docs = [decode(d) for d in docs]
    for doc in docs:
        if doc.emulation.description:
            out.append(Emulation(doc.label, doc.emulation.description))
    for cell, doc in zip(cells, docs):
        out += _cell_caveats(cell, doc)
    return out


def _cell_caveats(cell: CellSummary, doc: Document) -> list[Caveat]:
    out: list[Caveat] = []
    shared = shared_client_cpus(cell, doc)
    if shared:
        out.append(ClientsSharedCpu(doc.label, shared))
    cpu = cell.host_cpu
    low = []  # every op whose clients had fewer requests in flight than their number
    for op, ll in littles_law(cell).items():
        waited = None if cpu is None else (cpu.measured_client_wait if cell.ops[op].role == "measured"
                                           else cpu.background_client_wait)
        if ll.ratio < 0.8:
            low.append(InFlight(op, ll.in_flight, ll.clients, waited))
        elif waited is not None and waited >= CLIENT_WAIT_CAVEAT and cell.ops[op].role == "measured":
            out.append(ClientsWaitedCpu(doc.label, op, waited))
        if ll.ratio > 1.2:
            out.append(LittlesLawInconsistent(doc.label, op, ll.in_flight, ll.clients))
    if low:
        out.append(ClientsOwnTime(doc.label, low, any(x.waited is not None and x.waited >= CLIENT_WAIT_CAVEAT for x in low),
                                  all(x.waited is None for x in low)))
    steal, wall_s = (cpu.server_steal_ms, cpu.wall_s) if cpu else (None, None)
    if steal and wall_s and steal >= STEAL_CAVEAT * wall_s * 1000:
        out.append(HypervisorSteal(doc.label, STEAL_CAVEAT))
    if cell.server and (cell.server.main_thread.waiting_for_cpu_pct or 0) >= 20:
        out.append(MainCpuBound(doc.label, cell.server.main_thread.waiting_for_cpu_pct or 0))
    return out


def offload_mode(doc) -> str | None:
    """'durable' or 'early-ack' for a virtual offload recording (record --emulate-offload), else None."""
    return offload.mode(doc)


def acks_before_fsync(doc) -> bool:
    """True when the server acknowledges a SET before its fsync (everysec, no, or the virtual
    offload's early-ack): not durable."""
    s = decode(doc).server
    if offload_mode(doc) == "early-ack":
        return True
    return not (s.bio_aof_offload or s.appendfsync == "always")


def durability_differs(base_doc, cand_doc) -> DurabilityDiffers | None:
    b, c = not acks_before_fsync(base_doc), not acks_before_fsync(cand_doc)
    if b == c:
        return None
    loose = decode(cand_doc if b else base_doc)
    return DurabilityDiffers(None, loose.label, loose.server.appendfsync)


def _evidence_main(m: MainThread) -> dict:
    """The main thread's figures an explanation entry keeps as evidence: its scalars."""
    return {k: v for k, v in dataclasses.asdict(m).items() if not isinstance(v, (dict, list)) and v is not None}


MIN_FSYNCS_FOR_RATIO = 20  # fewer fsyncs in the windows than this: SETs per fsync is not a figure


def sets_per_fsync(cell: CellSummary) -> float | None:
    """SETs acknowledged per fsync in the window (group commit), from client SET TPS and all
    threads' fsync rate; None when the windows hold fewer than MIN_FSYNCS_FOR_RATIO fsyncs (7
    fsyncs under everysec made '31983.9 SETs per fsync' once: a ratio its count does not support)."""
    if not cell.server or "SET" not in cell.ops:
        return None
    tps = cell.ops["SET"].median.tps
    place = fsync_placement(cell.server)
    rate = sum(p.per_s or 0 for p in place)
    if not tps or not rate or sum(p.count for p in place) < MIN_FSYNCS_FOR_RATIO:
        return None
    return tps / rate


@dataclass
class ServerViewGap:
    """What the server's own INFO latencystats says against what the clients measured."""
    op: str
    server_p50_us: float
    client_p50_us: float | None

    def to_json(self) -> dict:
        return asdict(self)


def server_view_gap(runs: list, cell: CellSummary) -> ServerViewGap | None:
    """What the server's own INFO latencystats says against what clients measured."""
    op = MEASURED_OP.get(cell.workload)
    if not op or op not in cell.ops:
        return None
    views = [decode_as(r, Run).server_view.latencystats.get(op.lower()) for r in runs]
    p50s = sorted(v[LATENCYSTATS_P50] for v in views if v and LATENCYSTATS_P50 in v)
    if not p50s:
        return None
    return ServerViewGap(op, p50s[len(p50s) // 2], cell.ops[op].median.p50_us)


LATENCYSTATS_P50 = "p50"  # INFO latencystats' percentile key


@dataclass
class OffloadJobs(Clause):
    """What a SET waited for under a durable virtual offload, measured (the shim's jobs)."""
    CODE = "durability.offload_jobs"
    thread: str
    jobs_waited: float
    job_ms: float
    sets_per_job: float
    held_replies: int
    label: str = ""


def offload_jobs(label: str, doc, cell: CellSummary) -> OffloadJobs | None:
    j = offload.jobs(doc, cell.workload, cell.value_size)
    if not j or j.job_ms_mean is None:
        return None
    return OffloadJobs("vt_offload", j.jobs_waited_mean, j.job_ms_mean, j.sets_per_job, j.held_replies, label)


REPLY_BLOCKING = ("write_blocked_count", "read_blocked_count", "clients_waiting_ack")  # INFO debug's fields said


@dataclass
class ReplyBlocking(Clause):
    """A real #3381 build: what its INFO debug says it held, the median of the cell's runs at their
    windows' end (counts: [(field, value)]); runs 0: it gave no reply_blocking fields."""
    CODE = "side.reply_blocking"
    label: str
    runs: int
    counts: list


def reply_blocking(label: str, doc, cell: CellSummary) -> ReplyBlocking | None:
    doc = decode(doc)
    if not doc.server.bio_aof_offload:
        return None
    seen = [r.server_view.reply_blocking for r in doc.runs
            if r.status == "ok" and r.workload == cell.workload and r.value_size == cell.value_size
            and r.server_view.reply_blocking]

    def med(key):
        vals = sorted(v[key] for v in seen if isinstance(v.get(key), (int, float)))
        return vals[len(vals) // 2] if vals else None
    return ReplyBlocking(label, len(seen), [(k, med(k)) for k in REPLY_BLOCKING if med(k) is not None])


# the seed's write-only 64 B SET row (valkey-io/valkey#4029, ../shared/seed): what its numbers imply
# is computed below, never typed
@dataclass(frozen=True)
class SeedPoint:
    tps: float
    p50_us: float


@dataclass(frozen=True)
class SeedRow:
    clients: int
    baseline: SeedPoint
    candidate: SeedPoint


SEED_SET = SeedRow(50, SeedPoint(4840.0, 10831.0), SeedPoint(9020.0, 5463.0))


@dataclass
class SeedReading:
    """The seed's SET halving read by Little's law: two cohorts on the main thread, then either one
    cohort (every SET in one job) or the same two cohorts with an fsync twice as fast."""
    clients: int
    base: SeedPoint
    cand: SeedPoint
    in_flight: float
    cycles_per_s: float         # the baseline's, two cohorts
    cycle_ms: float
    one_jobs_per_s: float       # the candidate as one cohort
    one_job_ms: float
    two_jobs_per_s: float       # the candidate as two cohorts
    two_job_ms: float


def seed_set_reading() -> SeedReading:
    n, b, c = SEED_SET.clients, SEED_SET.baseline, SEED_SET.candidate
    return SeedReading(n, b, c, b.tps * b.p50_us / 1e6, b.tps / (n / 2), (n / 2) / b.tps * 1e3,
                       c.tps / n, n / c.tps * 1e3, c.tps / (n / 2), (n / 2) / c.tps * 1e3)


@dataclass
class SideDurability(Clause):
    """What a write waited for, from the kernel's durability record (analysis/durability.py)."""
    CODE = "side.durability"
    label: str
    thread: str
    jobs_waited: float
    job_ms: float
    jobs_per_s: float | None
    writes_per_job: float | None
    spread_us: float | None
    cohorts: int | None


def side_durability(label: str, cell: CellSummary) -> SideDurability | None:
    d = cell.server.durability if cell.server else None
    if not d or d.jobs_waited_per_write is None or not d.job_ms_p50:
        return None
    return SideDurability(label, d.thread, d.jobs_waited_per_write, d.job_ms_p50, d.jobs_per_s, d.writes_per_job,
                          d.arrival_spread_us, d.cohorts)


@dataclass
class SetMechanism(Clause):
    """Which of the SET's possible mechanisms the two sides show (what): the cohorts (how many jobs a
    write waits), each job's length (a faster fsync), or neither; and the seed's reading beside it."""
    CODE = "set_mechanism"
    what: str          # "cohorts", "job_length" or "neither"
    cohorts: list
    waited: list
    job_ms: list
    seed: SeedReading


def set_mechanism(b: CellSummary, c: CellSummary) -> SetMechanism | None:
    db, dc = (b.server.durability if b.server else None), (c.server.durability if c.server else None)
    if not db or not dc or db.jobs_waited_per_write is None or dc.jobs_waited_per_write is None:
        return None
    wb, wc = db.jobs_waited_per_write, dc.jobs_waited_per_write
    jb, jc = db.job_ms_p50, dc.job_ms_p50
    if jb is None or jc is None:
        return None
    what = ("cohorts" if db.cohorts != dc.cohorts or abs(wc - wb) >= 0.3 else
            "job_length" if abs(jc - jb) >= 0.15 * jb else "neither")
    return SetMechanism(what, [db.cohorts, dc.cohorts], [wb, wc], [jb, jc], seed_set_reading())

