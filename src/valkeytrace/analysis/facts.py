"""The facts the explanation stands on, each read off one side's analysed cell: where the fsyncs
ran and what the main thread did (the sentence every claim quotes), Little's law, the caveats a
cell carries, SETs per fsync, durability, and the server's own view (INFO latencystats). Pure.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

from valkeytrace.analysis import offload
from valkeytrace.analysis.note import Note
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


def _ms(us: float | None) -> str:
    if us is None:
        return "n/a"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def _pct(x: float) -> str:
    return f"{x:+.0f}%".replace("-", "\u2212")


def _where(label: str, server: ServerSummary | None, latency_us: float | None = None) -> str:
    """One sentence: where the fsyncs ran and what the main thread did (and, given a latency,
    how many time-weighted loop iterations it spans)."""
    if server is None:
        return f"{label}: no server figures."
    m = server.main_thread
    place = fsync_placement(server)
    f_pct = (m.blocked_in_fsync_pct or 0)
    parts = []
    main = next((p for p in place if p.role == "main"), None)
    if main:
        parts.append(f"the main thread spent {f_pct:.0f}% of wall time blocked in fdatasync "
                     + ("(inside one that did not complete in the window)" if main.in_flight else
                        f"({main.per_s or 0:.0f}/s, p50 {_ms(main.p50_us)})"))
    else:
        parts.append("the main thread is never blocked in fsync")
    for p in place:
        if p.role == "main":
            continue
        if p.in_flight:
            parts.append(f"fdatasync runs on {p.role} (none completed in the window: it was blocked inside "
                         f"one for {_ms((p.blocked_ms or 0) * 1000)} of it)")
        else:
            parts.append(f"fdatasync runs on {p.role} ({p.per_s or 0:.1f}/s, p50 {_ms(p.p50_us)})")
    if not place:
        parts.append("no thread called fsync in the window")
    if m.loop_iteration_tw_p50_us:
        parts.append(f"loop iteration p50 {_ms(m.loop_iteration_tw_p50_us)} (time-weighted, sampled)"
                     + _iterations(latency_us, server))
    elif m.loop_iteration_mean_us and m.loop_iterations_per_s and m.loop_iterations_counted:
        parts.append(f"{m.loop_iterations_per_s:.0f} loop iterations/s, mean {_ms(m.loop_iteration_mean_us)}")
    if (m.waiting_for_cpu_pct or 0) >= 10:
        parts.append(f"it waited for a CPU {m.waiting_for_cpu_pct:.0f}% of the time")
    return f"{label}: " + "; ".join(parts) + "."


def _iterations(lat_us: float | None, server: ServerSummary) -> str:
    it = server.main_thread.loop_iteration_tw_p50_us
    if not lat_us or not it:
        return ""
    return f"; the client latency spans {lat_us / it:.1f} loop iterations"


STEAL_CAVEAT = 0.01  # the hypervisor's steal on the server's CPUs above this share of the window gets a caveat
CLIENT_WAIT_CAVEAT = 0.2  # a measuring client waiting this share of its time for a CPU gets a caveat


def shared_client_cpus(cell: CellSummary, doc) -> str | None:
    """'CPU 1' when the cell's two client processes (read-heavy: GET measured, SET behind) were
    placed on fewer CPUs than processes (record --client-cpus), else None."""
    cpus = decode(doc).client.placement.client_cpus
    if not cpus or cell.workload != "read-heavy" or len(cpus) >= len(cell.ops):
        return None
    return ("CPUs " if len(cpus) > 1 else "CPU ") + ",".join(str(c) for c in cpus)


@dataclass
class Caveat:
    """A caveat as a record: its stable code, the side it is said of (None: both or neither), its words."""
    finding: str
    label: str | None
    text: str

    @property
    def words(self) -> str:
        return f"{self.label}: {self.text}" if self.label else self.text


def caveat(finding: str, label: str | None, text: str) -> Caveat:
    return Caveat(finding, label, text)


def caveat_words(c: Caveat) -> str:
    return c.words


def caveats(cells: list[CellSummary], docs: list) -> list[Caveat]:
    """The caveats of cells (one a side), as records (Caveat)."""
    out = []
    docs = [decode(d) for d in docs]
    for doc in docs:
        if doc.emulation.description:
            out.append(caveat("emulation", doc.label, doc.emulation.description))
    for cell, doc in zip(cells, docs):
        out += _cell_caveats(cell, doc)
    return out


def _cell_caveats(cell: CellSummary, doc: Document) -> list[Caveat]:
    out = []
    shared = shared_client_cpus(cell, doc)
    if shared:
        out.append(caveat("clients_shared_cpu", doc.label, f"the GET and the background SET clients shared {shared} "
                          "(--client-cpus auto on a host with too few CPUs to give each its own): each waited for the "
                          "other's turn on it, which shows in their tails (p95/p99)"))
    cpu = cell.host_cpu
    low = []  # one sentence for every op whose clients had fewer requests in flight than their number
    for op, ll in littles_law(cell).items():
        waited = None if cpu is None else (cpu.measured_client_wait if cell.ops[op].role == "measured"
                                           else cpu.background_client_wait)
        if ll.ratio < 0.8:
            low.append((op, ll, waited))
        elif waited is not None and waited >= CLIENT_WAIT_CAVEAT and cell.ops[op].role == "measured":
            out.append(caveat("clients_waited_cpu", doc.label, f"the {op} clients waited for a CPU "
                              f"{100 * waited:.0f}% of their time: the latency they report holds some of that "
                              "wait too, not only the server's"))
        if ll.ratio > 1.2:
            out.append(caveat("littles_law_inconsistent", doc.label, f"{op} TPS x mean latency = "
                              f"{ll.in_flight:.1f} exceeds {ll.clients} clients: the recording is inconsistent"))
    if low:
        parts = [f"{op} {ll.in_flight:.1f} of {ll.clients} clients in flight"
                 + ("" if w is None else f" (they waited for a CPU {100 * w:.0f}% of their time)")
                 for op, ll, w in low]
        held = any(w is not None and w >= CLIENT_WAIT_CAVEAT for _, _, w in low)
        unknown = all(w is None for _, _, w in low)
        out.append(caveat("clients_own_time", doc.label, "TPS x mean latency: " + ", ".join(parts)
                          + ": the clients spend time of their own between requests"
                          + (" (a CPU-bound benchmark client?)" if unknown else "")
                          + ("; the latency they report holds some of that CPU wait too, not only the server's"
                             if held else "")))
    steal, wall_s = (cpu.server_steal_ms, cpu.wall_s) if cpu else (None, None)
    if steal and wall_s and steal >= STEAL_CAVEAT * wall_s * 1000:
        out.append(caveat("hypervisor_steal", doc.label, f"the hypervisor took more than {STEAL_CAVEAT:.0%} "
                          "of the server's CPU time (steal: in the main thread's on-CPU time by its context "
                          "switches, not in schedstat's; --detail has the figures)"))
    if cell.server and (cell.server.main_thread.waiting_for_cpu_pct or 0) >= 20:
        out.append(caveat("main_cpu_bound", doc.label, f"the main thread waited for a CPU "
                          f"{cell.server.main_thread.waiting_for_cpu_pct:.0f}% of the time (CPU-bound host)"))
    return out


def offload_mode(doc) -> str | None:
    """'durable' or 'early-ack' for a virtual offload recording (record --emulate-offload), else None."""
    return offload.mode(doc)


def fsync_off_main(doc) -> bool:
    """The recording's server keeps the AOF fsync off its main thread: everysec/no, #3381's
    offload, or the virtual offload; the systems the what-if predicts."""
    s = decode(doc).server
    return bool(offload_mode(doc) or s.bio_aof_offload or s.appendfsync in ("everysec", "no"))


def acks_before_fsync(doc) -> bool:
    """True when the server acknowledges a SET before its fsync (everysec, no, or the virtual
    offload's early-ack): not durable."""
    s = decode(doc).server
    if offload_mode(doc) == "early-ack":
        return True
    return not (s.bio_aof_offload or s.appendfsync == "always")


def durability_note(base_doc, cand_doc) -> str | None:
    b, c = not acks_before_fsync(base_doc), not acks_before_fsync(cand_doc)
    if b == c:
        return None
    loose = decode(cand_doc if b else base_doc)
    return (f"durability differs: {loose.label} (appendfsync={loose.server.appendfsync}) "
            "acknowledges SETs before their fsync, the other after (as appendfsync always and #3381's "
            "offload do): SET rows are not comparable for durability")


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

    @property
    def claim(self) -> str:
        # valkey times a command with a microsecond clock: a sub-µs command is recorded as 1 ns
        p50 = self.server_p50_us
        return (f"the server's INFO latencystats puts {self.op} p50 {'under 1 µs' if p50 < 1 else f'at {p50:.3g} µs'}, "
                f"clients measured {_ms(self.client_p50_us)}: latencystats times command execution only, not the wait "
                "for the event loop (and the fsync in it) before the command runs and before its reply is written")

    def to_json(self) -> dict:
        return {**asdict(self), "claim": self.claim}


def server_view_gap(runs: list, cell: CellSummary) -> ServerViewGap | None:
    """What the server's own INFO latencystats says against what clients measured."""
    op = MEASURED_OP.get(cell.workload)
    if not op or op not in cell.ops:
        return None
    views = [decode_as(r, Run).server_view.latencystats.get(op.lower()) for r in runs]
    p50s = sorted(v[P50] for v in views if v and P50 in v)
    if not p50s:
        return None
    return ServerViewGap(op, p50s[len(p50s) // 2], cell.ops[op].median.p50_us)


P50 = "p50"  # INFO latencystats' percentile key


def offload_sentence(label: str, doc, cell: CellSummary, notes: list | None = None) -> str:
    """What a SET waited for under a durable virtual offload, measured: '' elsewhere."""
    j = offload.jobs(doc, cell.workload, cell.value_size)
    if not j or j.job_ms_mean is None:
        return ""
    w = j.jobs_waited_mean
    if notes is not None:
        notes.append(Note("durability.offload_jobs", {"thread": "vt_offload", "jobs_waited": w,
                                                       "job_ms": j.job_ms_mean, "sets_per_job": j.sets_per_job,
                                                       "held_replies": j.held_replies}))
    how = ("the clients answer in two cohorts: a SET that arrives while a job is in flight waits it out, then "
           "its own" if w >= 1.5 else "one batch per round trip: group commit")
    return (f"{label}: each SET waited {w:.1f} jobs of {j.job_ms_mean:.2f} ms (a batch's write + fdatasync on "
            f"vt_offload; {j.sets_per_job:.1f} SETs a job, {j.held_replies:,} replies held): {how}.")


def reply_blocking_sentence(label: str, doc, cell: CellSummary) -> str:
    """A real #3381 build (bio-aof-offload-enabled yes): what the server's INFO debug says it held,
    the median of the cell's runs at their windows' end; '' elsewhere."""
    doc = decode(doc)
    if not doc.server.bio_aof_offload:
        return ""
    seen = [r.server_view.reply_blocking for r in doc.runs
            if r.status == "ok" and r.workload == cell.workload and r.value_size == cell.value_size
            and r.server_view.reply_blocking]
    if not seen:
        return (f"{label}: #3381's offload is on (bio-aof-offload-enabled yes), but its INFO debug gave no "
                "reply_blocking fields: the replies it held are not counted.")

    def med(key):
        vals = sorted(v[key] for v in seen if isinstance(v.get(key), (int, float)))
        return vals[len(vals) // 2] if vals else None
    parts = [f"{what} {med(key):,}" for key, what in (("write_blocked_count", "writes held"),
                                                      ("read_blocked_count", "reads held"),
                                                      ("clients_waiting_ack", "clients waiting for an ack"))
             if med(key) is not None]
    return (f"{label}: #3381's own count (INFO debug reply_blocking, at the window's end, median of "
            f"{len(seen)} run(s)): " + ", ".join(parts) + "; the wait for each batch is not split out "
            "(a real build counts no jobs per reply: record --emulate-offload measures them).")


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


def seed_set_reading() -> str:
    """The seed's SET halving read by Little's law: two cohorts on the main thread, then either
    one cohort (every SET in one job) or the same two cohorts with an fsync twice as fast."""
    n, b, c = SEED_SET.clients, SEED_SET.baseline, SEED_SET.candidate
    in_flight = b.tps * b.p50_us / 1e6
    cyc_b = (n / 2) / b.tps * 1e3
    return (f"the seed's write-only 64 B SET went {b.tps / 1000:.2f}K/s at p50 {b.p50_us / 1000:.1f} ms "
            f"({in_flight:.0f} SETs in flight by Little's law: its {n} clients; two cohorts: "
            f"{b.tps / (n / 2):.0f} cycles/s of {n // 2} SETs, {cyc_b:.2f} ms each) to "
            f"{c.tps / 1000:.2f}K/s at {c.p50_us / 1000:.2f} ms: either one cohort "
            f"({c.tps / n:.0f} jobs/s of {n} SETs, {n / c.tps * 1e3:.2f} ms a job, as long as the cycle before: "
            f"one wait instead of two) or two cohorts with the fsync twice as fast off the main thread "
            f"({c.tps / (n / 2):.0f} jobs/s of {n // 2}, {(n / 2) / c.tps * 1e3:.2f} ms a job)")


def _cohorts(k: int | None) -> str:
    return {1: "one cohort", 2: "two cohorts"}.get(k or 0) or (f"{k} cohorts taking turns" if k else "cohorts not counted")


def _cohort_words(k: int | None, unit: str) -> str:
    if k == 1:
        return f"{_cohorts(k)}: every client's write rides the same {unit}"
    if k == 2:
        return (f"{_cohorts(k)}: a write that arrives while the other cohort's {unit} is in flight waits it out, "
                "then its own")
    return _cohorts(k)


def durability_sentence(label: str, cell: CellSummary) -> str:
    """What a write waited for, from the kernel's durability record (analysis/durability.py)."""
    d = cell.server.durability if cell.server else None
    if not d or d.jobs_waited_per_write is None or not d.job_ms_p50:
        return ""
    unit = "fsync cycle" if d.thread == "main" else "job"
    spread = d.arrival_spread_us
    return (f"{label}: each SET waited {d.jobs_waited_per_write:.1f} {unit}s of {d.job_ms_p50:.2f} ms on "
            f"{d.thread} ({d.jobs_per_s:.0f}/s, {d.writes_per_job:.1f} writes {'an' if unit[0] == 'f' else 'a'} {unit}"
            + (f"; a released cohort's next writes arrive within {spread:.0f} µs" if spread is not None else "")
            + f", from the kernel's timestamps): {_cohort_words(d.cohorts, unit)}.")


def set_mechanism(b: CellSummary, c: CellSummary) -> str:
    """Which of the SET's possible mechanisms the two sides show: the cohorts (how many jobs a
    write waits) or each job's length (a faster fsync), or neither."""
    db, dc = (b.server.durability if b.server else None), (c.server.durability if c.server else None)
    if not db or not dc or db.jobs_waited_per_write is None or dc.jobs_waited_per_write is None:
        return ""
    wb, wc = db.jobs_waited_per_write, dc.jobs_waited_per_write
    jb, jc = db.job_ms_p50, dc.job_ms_p50
    if jb is None or jc is None:
        return ""
    if db.cohorts != dc.cohorts or abs(wc - wb) >= 0.3:
        what = (f"the cohorts ({db.cohorts} -> {dc.cohorts}): a write waits {wb:.1f} -> {wc:.1f} "
                f"of them, each {jb:.2f} -> {jc:.2f} ms")
    elif abs(jc - jb) >= 0.15 * jb:
        what = f"each job's length ({jb:.2f} -> {jc:.2f} ms, a faster fsync), {wb:.1f} -> {wc:.1f} a write"
    else:
        what = (f"neither: a write waits {wb:.1f} -> {wc:.1f} jobs of {jb:.2f} -> {jc:.2f} ms, the same "
                f"{_cohorts(dc.cohorts)}")
    return f"The SET's mechanism: {what}. For reference, {seed_set_reading()}."
