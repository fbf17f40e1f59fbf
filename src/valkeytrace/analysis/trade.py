"""The dirty-replica trade of one compare (record --offload-replicas on each side): per cell both sides
replicated, what each way of keeping the stream gives (dirty reads, phantom reads, writes that reached a
replica before they were durable) and what it costs (replica lag, WAITAOF, the replica readers' and the
primary's latency and throughput), side by side; `gains` and `costs` name the figures that moved, in the
candidate's favour or against it. Figures only: reporters/trade_words.py says them."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from valkeytrace.workloads import REPLICA_OP

MOVED = 0.15  # a latency or throughput that moved by this share or more is a gain or a cost
# (figure, lower is better) in the order the line says them
FIGURES = (("reads_dirty", True), ("phantom_reads", True), ("writes_seen_dirty_share", True), ("lag_p50_us", True),
           ("waitaof_p50_us", True), ("waitaof_p99_us", True), ("replica_get_p50_us", True),
           ("replica_get_p99_us", True), ("set_p50_us", True), ("set_tps", False))
COUNTS = ("reads_dirty", "phantom_reads", "writes_seen_dirty_share")  # any change of these is a gain or a cost


@dataclass
class ReplicaTrade:
    workload: str
    value_size: int
    modes: list                  # [baseline, candidate] --offload-replicas (None: no durable offload on that side)
    figures: dict                # name -> [baseline, candidate] (None: not measured)
    reads: list                  # the replica reads each side could judge (reads_checked: the dirty reads' denominator)
    gains: list = field(default_factory=list)  # names of the figures the candidate improved
    costs: list = field(default_factory=list)  # and of those it made worse
    # committed candidate, a baseline whose stream left at once: its lag as the baseline predicts it (each of its
    # writes' wait for its durability plus its link transit: replication.committed_lag_p50_us), and the error
    predicted_lag_p50_us: float | None = None
    predicted_error_pct: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


def _mode(run) -> str | None:
    off = run.doc.emulation.offload
    return off.replicas if off is not None and off.mode == "durable" else None


def _moved(name: str, lower_better: bool, b, c, significant: bool | None = None) -> int:
    """+1 the candidate is better, -1 worse, 0 the same (or unknown, or a move the compare found not significant)."""
    if b is None or c is None or significant is False:
        return 0
    if name in COUNTS:
        if (b > 0) == (c > 0):
            return 0
        better = c < b
    else:
        if not b or abs(c - b) < MOVED * abs(b):
            return 0
        better = (c < b) == lower_better
    return 1 if better else -1


def trades(base_run, cand_run, comparison) -> list[ReplicaTrade]:
    """A ReplicaTrade per cell both sides replicated."""
    if comparison is None:
        return []
    ops = {(r.workload, r.value_size, r.op): r for r in comparison.rows if not r.rate}
    checks = (base_run.durability_check, cand_run.durability_check)
    phantoms = [c.phantom_reads if c is not None else None for c in checks]
    out = []
    for row in comparison.replication:
        sides = (row.base, row.cand)
        dirty = [s.dirty or {} for s in sides]
        get, st = ops.get((row.workload, row.value_size, REPLICA_OP)), ops.get((row.workload, row.value_size, "SET"))

        def op(r, metric):
            return [None, None] if r is None else [r.base.median.get(metric), r.cand.median.get(metric)]
        figures = {"reads_dirty": [d.get("reads_dirty") for d in dirty], "phantom_reads": phantoms,
                   "writes_seen_dirty_share": [d["writes_seen_dirty"] / d["writes"] if d.get("writes") else None
                                               for d in dirty],
                   **{m: [getattr(s, m) for s in sides] for m in ("lag_p50_us", "waitaof_p50_us", "waitaof_p99_us")},
                   "replica_get_p50_us": op(get, "p50_us"), "replica_get_p99_us": op(get, "p99_us"),
                   "set_p50_us": op(st, "p50_us"), "set_tps": op(st, "tps")}
        t = ReplicaTrade(row.workload, row.value_size, [_mode(base_run), _mode(cand_run)], figures,
                         [d.get("reads_checked") for d in dirty])
        sig = {**{m: row.significant.get(m) for m in ("lag_p50_us", "waitaof_p50_us", "waitaof_p99_us")},
               **{f"{p}_{m}": r.significant.get(m) for p, r in (("replica_get", get), ("set", st)) if r is not None
                  for m in ("p50_us", "p99_us")}, "set_tps": st.significant.get("tps") if st is not None else None}
        if t.modes[1] == "committed" and row.base.committed_lag_p50_us and row.cand.lag_p50_us:
            t.predicted_lag_p50_us = row.base.committed_lag_p50_us
            t.predicted_error_pct = round(100 * (t.predicted_lag_p50_us / row.cand.lag_p50_us - 1), 1)
        for name, lower in FIGURES:
            b, c = figures[name]
            m = _moved(name, lower, b, c, sig.get(name))
            (t.gains if m > 0 else t.costs if m < 0 else []).append(name)
        out.append(t)
    return out
