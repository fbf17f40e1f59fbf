"""The #4029 tables from recordings: medians of repeats per cell, and deltas between two systems.

Conventions (those of valkey#4029):
  - a cell is (workload, value size); each metric is the median of its repeats (numpy median);
  - MB/s = TPS x value bytes / 10^6;
  - delta = (candidate - baseline) / baseline x 100; TPS and MB/s positive = better,
    latencies negative = better;
  - significance (significance()), with n >= 2 repeats on each side (else unknown): the medians
    differ by at least MIN_EFFECT (15%: three SDs of this host's launch-to-launch A/A spread), AND
    either the repeats' min-max ranges are disjoint (every repeat of one side beyond every repeat of the
    other: p = 0.1 by permutation at 3 vs 3) or the clients' own interval samples (the
    benchmark's progress lines, ~4 a second: interval rate for TPS and MB/s, interval mean latency
    for the percentiles) of one side are shifted from the other's in the direction of the metric,
    by a two-sided Mann-Whitney rank test at p < 0.01 (strict: neighbouring intervals are
    correlated; needs MIN_SAMPLES intervals a side). "Within noise" is its negation (unknown
    counts as within noise). A p50 whose repeats lie on different paths of the server (p50s more
    than PATH_SPLIT fsync cycles apart: one cycle per request in some, two in others) is no basis
    for significance (OpSummary.paths) unless every repeat of one side differs from every repeat
    of the other by MIN_EFFECT: a pair of such recordings within the modes' reach is noise between
    modes of the server, not a change to explain. The same holds between the sides with one launch
    each (path_bound): when both main threads fsync regularly and the sides' median p50s in fsync
    cycles differ by PATH_CHANGE or more, the change is (in part) a change of path, which one launch
    a side cannot tell from the launch's mode (A/A pairs at always +4 ms: 1.07-1.46 cycles in one
    launch, 1.73-1.75 in the next, +38%); it is significant only beyond the paths' reach (every
    path of one side, 1 to 2 cycles, beyond every path of the other).
  - runs made at an added fsync delay (record --fsync-sensitivity) are not part of the tables:
    summarize() takes the runs at one added delay, 0 by default.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from valkeytrace import workloads
from valkeytrace.analysis import launches
from valkeytrace.analysis.intervals import ALPHA
from valkeytrace.workloads import SATURATED_SHARE
from valkeytrace.analysis.cluster import ConfigFsyncSummary, config_fsync, shard_summaries
from valkeytrace.analysis.replication import Replication, replica_summaries, replication
from valkeytrace.analysis.server import server_steal_ns, summarize_server
from valkeytrace.analysis.summary import Durability, ServerSummary
from valkeytrace.recording.model import CpuWait, Document, Op, Run, decode, decode_as

WORKLOADS = workloads.NAMES  # the registry's (valkeytrace/workloads.py)
MEASURED_OP = workloads.MEASURED_OP
OPS_BY_WORKLOAD = workloads.OPS
METRICS = ("tps", "mb_s", "p50_us", "p95_us", "p99_us")
# an open-loop op's figures beside them (record --rate): the rates, the service time (from the send)
OPEN_METRICS = ("offered_rate", "achieved_rate", "service_p50_us", "service_p99_us", "late", "unanswered",
                "rejected", "client_us_per_request", "stall_p50_us", "stall_p99_us", "outside_p50_us",
                "outside_p99_us")
HIGHER_IS_BETTER = {"tps": True, "mb_s": True, "p50_us": False, "p95_us": False, "p99_us": False}
# smallest relative change called significant: a recording is one server launch, and its repeats
# share it, so no test on them sees the launch-to-launch spread: A/A pairs of recordings moved GET
# p50 by -5.5% to +6% here (SD 3.4% over 9 pairs) with the clients left to the kernel, and by -6%
# to +8% (SD 4.4% over 14 pairs) with the clients and the server on CPUs of their own (record
# --client-cpus auto), where one more pair in CI (always +4 ms, 2 repeats) came out +14%: 15% is
# three of those SDs (it was 10% until 2026-12-01)
MIN_EFFECT = 0.15
MIN_SAMPLES = 6    # interval samples a side for the rank test
PATH_SPLIT = 0.5   # fsync cycles between two repeats' p50s that put them on different paths
PATH_CHANGE = 0.1  # fsync cycles between the two sides' median p50s that make the change one of path
PATH_REACH = (1.0, 2.0)  # fsync cycles a request's p50 spans on the paths seen (one cycle, or two)


@dataclass
class Figures:
    """An op's figures by metric (the medians of its repeats, or one repeat's): attributes, and by a
    metric's name for the code that walks METRICS (None where no repeat had the metric)."""
    tps: float | None = None
    mb_s: float | None = None
    p50_us: float | None = None
    p95_us: float | None = None
    p99_us: float | None = None
    mean_us: float | None = None
    offered_rate: float | None = None
    achieved_rate: float | None = None
    service_p50_us: float | None = None
    service_p99_us: float | None = None
    late: float | None = None
    unanswered: float | None = None
    rejected: float | None = None  # error replies a server refusing the request gave (--offload-overflow reject)
    stall_p50_us: float | None = None  # open loop, injected stalls: requests due during one
    stall_p99_us: float | None = None
    outside_p50_us: float | None = None  # and those due outside every one
    outside_p99_us: float | None = None
    client_us_per_request: float | None = None

    def __getitem__(self, metric: str) -> float | None:
        return getattr(self, metric)

    def get(self, metric: str, default=None):
        v = getattr(self, metric, None)
        return default if v is None else v


FIGURES = tuple(f.name for f in fields(Figures))


@dataclass
class OpSummary:
    op: str
    role: str            # "measured" or "background"
    clients: int | None
    n: int
    median: Figures      # metric -> median (None when no repeat had it)
    spread: dict         # metric -> [min, max] or None
    values: dict = field(default_factory=dict)  # metric -> list of per-repeat values
    intervals: dict = field(default_factory=dict)  # "rps" / "latency_us" -> the clients' interval samples
    # each repeat's p50 in the main thread's fsync cycles (model.loop_cycle; empty without
    # regular main-thread fsyncs), and their unit, µs
    paths: list = field(default_factory=list)
    cycles_us: list = field(default_factory=list)
    # metric -> one figure per server launch (valkeytrace compare; analysis/launches.py), [] for one launch
    launch_values: dict = field(default_factory=dict)

    @property
    def saturated(self) -> bool | None:
        """An open-loop op that answered less than SATURATED_SHARE of what was offered (None: closed loop)."""
        off, ach = self.median.offered_rate, self.median.achieved_rate
        return None if not off or ach is None else ach < SATURATED_SHARE * off

    @property
    def split(self) -> bool:
        """The repeats' p50s lie on different paths (PATH_SPLIT or more fsync cycles apart)."""
        return len(self.paths) >= 2 and max(self.paths) - min(self.paths) >= PATH_SPLIT

    def get(self, metric: str):
        return self.median.get(metric)


@dataclass
class CellSummary:
    workload: str
    value_size: int
    repeats: int         # successful repeats
    failed: int
    ops: dict            # op -> OpSummary
    server: ServerSummary | None = None  # analysis.server.summarize_server of the ok repeats
    host_cpu: "CellCpu | None" = None  # median cores per consumer over the repeats' windows (system.cpu_window)
    # per ok repeat, in order (repeat_detail): each op's p50 and mean, the repeat's own server
    # summary, and who waited for a CPU in it
    per_repeat: list = field(default_factory=list)
    replicas: list = field(default_factory=list)  # record --replicas: each replica's ServerSummary
    replication: Replication | None = None  # record --replicas
    rate: float | None = None    # open loop (record --rate): the measured op's requests due per second
    pool: str | None = None      # open loop: "fixed" (connections, one request in flight each) or "grow"
    connections: int | None = None  # the fixed pool's connections
    shards: list = field(default_factory=list)  # record --cluster: analysis.cluster.ShardSummary each
    config_fsync: "ConfigFsyncSummary | None" = None  # record --cluster: the nodes' nodes.conf syncs

    @property
    def key(self) -> tuple:
        """(workload, value_size, rate): what tells two cells of a recording apart."""
        return (self.workload, self.value_size, self.rate)

    @property
    def load(self) -> dict:
        """cells[].load: {"mode": "closed"} or {"mode": "open", "rate": R, "pool": ..., "connections": N}."""
        if not self.rate:
            return {"mode": "closed"}
        return {"mode": "open", "rate": self.rate, "pool": self.pool,
                **({"connections": self.connections} if self.connections else {})}


@dataclass
class RepeatOp:
    """One op of one repeat: its figures, the clients' interval samples, who ran it."""
    figures: Figures
    rps: list
    latency_us: list
    role: str
    clients: int | None
    launch: int | None


def _op_values(run: Run, op: str, size: int) -> RepeatOp | None:
    res = run.ops.get(op)
    if not res or res.tps is None:
        return None
    tps = float(res.tps)
    # the client's progress lines ([t, rps, mean ms]); the first interval holds the connection set-up
    prog = [p for p in res.progress[1:] if p[1] and p[2] is not None]
    fig = Figures(tps=tps, mb_s=tps * size / 1e6, p50_us=res.p50_us, mean_us=res.mean_us, p95_us=res.p95_us,
                  p99_us=res.p99_us, **{k: getattr(res, k) for k in OPEN_METRICS})
    return RepeatOp(fig, [float(p[1]) for p in prog], [float(p[2] or 0) * 1000 for p in prog], res.role or "measured",
                    res.clients, run.launch)


def latency_cdf(op_result) -> list[tuple[float, float]]:
    """[(latency µs, percent of requests at or below it)] of one client result: the client's
    percentile distribution (the halving percentiles 50, 75, 87.5, ...) merged with its cumulative
    distribution (every ~0.1 ms up to 2 ms, then every ms), sorted by latency."""
    res = decode_as(op_result, Op)
    rows = list(res.percentile_distribution) + list(res.cumulative_distribution)
    out = set()
    for r in rows:
        try:
            out.add((float(r[1]) * 1000, float(r[0])))
        except (TypeError, ValueError, IndexError, KeyError):
            continue  # a row the schema let through that is not one
    return sorted(out)


def extra_delays(doc) -> list[int]:
    """The added fsync delays (ns) the recording's runs were made at: [0] without sensitivity runs."""
    return sorted({int(r.fsync_extra_delay_ns or 0) for r in decode(doc).runs} | {0})


@dataclass
class CellCpu:
    """Who used the host's CPUs over a cell's windows (the medians of its repeats; system.cpu_window)."""
    cpus: int | None = None
    wall_s: float | None = None
    host_cores: float | None = None
    server_cores: float | None = None
    clients_cores: float | None = None
    tracer_cores: float | None = None
    other_cores: float | None = None
    measured_client_wait: float | None = None    # the clients' share of their time waiting for a CPU
    background_client_wait: float | None = None
    server_steal_ms: float | None = None         # the hypervisor's steal on the server's CPUs

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _cell_cpu(doc: Document, runs: list[Run]) -> CellCpu | None:
    rows = []
    for r in runs:
        h = r.host_cpu
        if not h:
            continue
        steal = server_steal_ns(doc, r)
        wait = h.clients_cpu_wait or CpuWait()
        rows.append(CellCpu(h.cpus, h.wall_s, h.host_cores, h.server_cores, h.clients_cores, h.tracer_cores,
                            h.other_cores, wait.measured, wait.background, None if steal is None else steal / 1e6))
    if not rows:
        return None
    out = CellCpu(cpus=rows[0].cpus)
    for f in fields(CellCpu):
        vals = [getattr(c, f.name) for c in rows if getattr(c, f.name) is not None]
        if f.name != "cpus" and vals:
            setattr(out, f.name, float(np.median(vals)))
    return out


@dataclass
class RepeatDetail:
    """One repeat on its own: the p50 and mean per op, its server summary (None without a trace),
    what the model needs to weigh the main thread's long stalls (per op: clients, TPS, the latency
    CDF), and who waited for a CPU in it."""
    repeat: int | None
    launch: int | None
    p50_us: dict                  # op -> p50
    mean_us: dict                 # op -> mean
    meet: dict                    # op -> Meet
    server: ServerSummary | None
    main_cpu_wait_pct: float | None
    measured_client_wait: float | None
    background_client_wait: float | None


@dataclass
class Meet:
    clients: int | None
    tps: float | None
    cdf: list


def repeat_detail(run) -> RepeatDetail:
    """One repeat on its own: the p50 and mean per op, its server summary (analysis.server; None
    without a trace), and who waited for a CPU in it: the main thread (% of the window, from the
    tracer) and the clients (share of their time, run.host_cpu.clients_cpu_wait)."""
    run = decode_as(run, Run)
    srv = summarize_server([run.server]) if run.server else None
    wait = (run.host_cpu.clients_cpu_wait if run.host_cpu else None) or CpuWait()
    ops = run.ops
    return RepeatDetail(run.repeat, run.launch, {op: r.p50_us for op, r in ops.items()},
                        {op: r.mean_us for op, r in ops.items()},
                        {op: Meet(r.clients, r.tps, latency_cdf(r)) for op, r in ops.items()}, srv,
                        srv.main_thread.waiting_for_cpu_pct if srv else None, wait.measured, wait.background)


def repeat_paths(per_repeat: list[RepeatDetail], op: str) -> tuple[list[float], list[float]]:
    """Each repeat's p50 of op in its main thread's fsync cycles, and the cycles' length (µs), when
    every repeat has regular main-thread fsyncs (model.loop_cycle's unit is the fsync cycle); else
    ([], [])."""
    from valkeytrace.analysis import model

    out, cycles = [], []
    for r in per_repeat:
        p50, srv = r.p50_us.get(op), r.server
        if p50 is None or not srv or model.unmodelled_reason(srv):
            return [], []
        cyc = model.loop_cycle(srv)
        if cyc.unit != "fsync cycle" or not cyc.duration_us:
            return [], []
        out.append(round(p50 / cyc.duration_us, 2))
        cycles.append(cyc.duration_us)
    return out, cycles


def summarize(doc, extra_delay_ns: int = 0) -> list[CellSummary]:
    """One CellSummary per (workload, value_size, rate) present in the recording, in matrix order,
    from the runs made at extra_delay_ns of added fsync delay (0: the recording's own cells)."""
    doc = decode(doc)
    order: list[tuple] = []
    groups: dict[tuple, list[Run]] = {}
    failed: dict[tuple, int] = {}
    for run in doc.runs:
        key = (run.workload, int(run.value_size), run.load.rate if run.load else None)
        if run.workload not in OPS_BY_WORKLOAD or int(run.fsync_extra_delay_ns or 0) != extra_delay_ns:
            continue
        if key not in groups:
            order.append(key)
            groups[key] = []
            failed[key] = 0
        if run.status == "ok":
            groups[key].append(run)
        else:
            failed[key] += 1
    cells = []
    for key in sorted(order, key=lambda k: (WORKLOADS.index(k[0]), k[1], k[2] or 0)):
        workload, size, rate = key
        ops = {op: o for op in OPS_BY_WORKLOAD[workload] if (o := _op_summary(groups[key], op, size))}
        server = summarize_server([r.server for r in groups[key]])
        per_repeat = [repeat_detail(r) for r in groups[key]]
        for op, o in ops.items():
            o.paths, o.cycles_us = repeat_paths(per_repeat, op)
        reps = replica_summaries(groups[key])
        load = next((r.load for r in groups[key] if r.load), None)
        cells.append(CellSummary(workload, size, len(groups[key]), failed[key], ops, server,
                                 _cell_cpu(doc, groups[key]), per_repeat, reps, replication(groups[key], reps), rate,
                                 pool=load.pool if load else None,
                                 connections=load.connections if load else None,
                                 shards=shard_summaries(doc, groups[key], lambda rs, op: _op_summary(rs, op, size)),
                                 config_fsync=config_fsync(groups[key])))
    return cells


def _op_summary(runs: list[Run], op: str, size: int) -> OpSummary | None:
    rows = [v for v in (_op_values(r, op, size) for r in runs) if v]
    if not rows:
        return None
    values: dict[str, list[float]] = {m: [v for r in rows if (v := r.figures[m]) is not None] for m in FIGURES}
    return OpSummary(
        op=op, role=rows[0].role, clients=rows[0].clients, n=len(rows),
        median=Figures(**{m: float(np.median(v)) if v else None for m, v in values.items()}),
        spread={m: [float(min(v)), float(max(v))] if v else None for m, v in values.items()},
        values=values,
        launch_values={m: launches.launch_figures([(r.launch, r.figures[m]) for r in rows])
                       for m in METRICS + ("mean_us",)},
        intervals={"rps": [x for r in rows for x in r.rps], "latency_us": [x for r in rows for x in r.latency_us]})


def delta_pct(base: float | None, cand: float | None) -> float | None:
    if base is None or cand is None or base == 0:
        return None
    return (cand - base) / base * 100.0


def launch_interval(a: OpSummary, b: OpSummary, metric: str) -> "launches.Interval | None":
    """The launches' rule (analysis/launches.py) for metric, or None below 3 launches a side."""
    return launches.interval(a.launch_values.get(metric) or [], b.launch_values.get(metric) or [])


def significance(a: OpSummary, b: OpSummary, metric: str) -> bool | None:
    """True: a significant change of metric from a to b; False: within noise; None: unknown
    (fewer than 2 repeats on a side, or the metric missing). With 3 launches a side or more, the
    launches decide (a 95% interval of the change that excludes 0); else the repeats do."""
    iv = launch_interval(a, b, metric)
    if iv is not None:
        return iv.significant
    ra, rb = a.spread.get(metric), b.spread.get(metric)
    va, vb = a.get(metric), b.get(metric)
    if ra is None or rb is None or va is None or vb is None:
        return None
    if len(a.values.get(metric) or ()) < 2 or len(b.values.get(metric) or ()) < 2:
        return None
    if va == 0 or abs(vb - va) < MIN_EFFECT * abs(va):
        return False
    if metric == "p50_us" and path_bound(a, b):
        return False
    if ra[1] < rb[0] or rb[1] < ra[0]:
        return True
    key = "rps" if metric in ("tps", "mb_s") else "latency_us"
    xa, xb = a.intervals.get(key) or [], b.intervals.get(key) or []
    if len(xa) >= MIN_SAMPLES and len(xb) >= MIN_SAMPLES:
        same_direction = (np.median(xb) - np.median(xa)) * (vb - va) > 0
        if not same_direction:
            return False
        from scipy.stats import mannwhitneyu  # ~0.5 s to import: only when a test is due

        return bool(mannwhitneyu(xa, xb, alternative="two-sided").pvalue < ALPHA)
    return False


def path_bound(a: OpSummary, b: OpSummary) -> bool:
    """The p50's change from a to b (one launch a side) may be the server's path, not a change: a
    side's repeats lie on different paths (split) and not every repeat of one side is MIN_EFFECT
    beyond every repeat of the other; or the sides' median paths differ by PATH_CHANGE cycles or
    more and their reaches (PATH_REACH cycles of each side's cycle lengths) overlap."""
    if (a.split or b.split) and not _beyond_all(a.values.get("p50_us") or [0], b.values.get("p50_us") or [0]):
        return True
    if not a.paths or not b.paths or abs(float(np.median(a.paths)) - float(np.median(b.paths))) < PATH_CHANGE:
        return False
    lo_a, hi_a = PATH_REACH[0] * min(a.cycles_us), PATH_REACH[1] * max(a.cycles_us)
    lo_b, hi_b = PATH_REACH[0] * min(b.cycles_us), PATH_REACH[1] * max(b.cycles_us)
    return not (hi_a < lo_b or hi_b < lo_a)


def _beyond_all(xa: list, xb: list) -> bool:
    """Every value of one side differs from every value of the other by MIN_EFFECT or more."""
    lo, hi = (xa, xb) if max(xa) < min(xb) else (xb, xa)
    return max(lo) < min(hi) and min(hi) - max(lo) >= MIN_EFFECT * max(lo)


@dataclass
class CompareRow:
    """One op of one cell on both sides; each metric's significance and launch interval decided
    once, here (every reporter and the verdict read them)."""
    workload: str
    op: str
    value_size: int
    base: OpSummary
    cand: OpSummary
    deltas: dict        # metric -> pct or None
    significant: dict   # metric -> True / False / None (unknown): significance()
    interval: dict      # metric -> launches.interval() or None (below 3 launches a side)
    rate: float | None = None  # open loop: the cell's offered rate

    @property
    def noise(self) -> dict:
        """metric -> True when the change cannot be told from noise (or is unknown), the table's metrics."""
        return {m: self.significant[m] is not True for m in self.deltas}


@dataclass
class ReplicationRow:
    """One cell's replication figures on both sides (record --replicas on both): each metric's
    significance decided once (replication.significance)."""
    workload: str
    value_size: int
    base: Replication
    cand: Replication
    base_durability: Durability | None  # of the primary, each side
    cand_durability: Durability | None
    deltas: dict        # metric -> pct or None
    significant: dict   # metric -> True / False / None
    rule: dict          # metric -> how it was decided


@dataclass
class Comparison:
    rows: list
    missing: list  # human sentences: cells or ops one side lacks
    replication: list = field(default_factory=list)  # ReplicationRow per cell both sides replicated


def compare(base_cells: list[CellSummary], cand_cells: list[CellSummary],
            base_label: str = "baseline", cand_label: str = "candidate") -> Comparison:
    bmap = {c.key: c for c in base_cells}
    cmap = {c.key: c for c in cand_cells}
    rows, missing = [], []
    for key in sorted(set(bmap) | set(cmap), key=lambda k: (WORKLOADS.index(k[0]), k[1], k[2] or 0)):
        if key not in bmap or key not in cmap:
            who = base_label if key not in bmap else cand_label
            missing.append(f"{key[0]} {key[1]} B{f' at {key[2]:,.0f}/s' if key[2] else ''}: not in {who}")
            continue
        b, c = bmap[key], cmap[key]
        for op in OPS_BY_WORKLOAD[key[0]]:
            if op not in b.ops or op not in c.ops:
                if op == MEASURED_OP[key[0]]:
                    who = base_label if op not in b.ops else cand_label
                    missing.append(f"{key[0]} {key[1]} B {op}: no successful run in {who}")
                continue
            bo, co = b.ops[op], c.ops[op]
            metrics = METRICS + ("mean_us",)
            rows.append(CompareRow(key[0], op, key[1], bo, co,
                                   {m: delta_pct(bo.get(m), co.get(m)) for m in METRICS},
                                   {m: significance(bo, co, m) for m in metrics},
                                   {m: launch_interval(bo, co, m) for m in metrics}, key[2]))
    return Comparison(rows, missing, [_replication_row(bmap[k], cmap[k]) for k in sorted(set(bmap) & set(cmap),
                      key=lambda k: (WORKLOADS.index(k[0]), k[1], k[2] or 0)) if bmap[k].replication and cmap[k].replication])


def _replication_row(b: CellSummary, c: CellSummary) -> ReplicationRow:
    from valkeytrace.analysis import replication as repl

    assert b.replication is not None and c.replication is not None  # comparison() pairs replicated cells only
    decided = {m: repl.significance(b.replication, c.replication, m, MIN_EFFECT) for m in repl.METRICS}
    return ReplicationRow(b.workload, b.value_size, b.replication, c.replication,
                          b.server.durability if b.server else None, c.server.durability if c.server else None,
                          {m: delta_pct(getattr(b.replication, m), getattr(c.replication, m)) for m in repl.METRICS},
                          {m: d[0] for m, d in decided.items()}, {m: d[1] for m, d in decided.items()})
