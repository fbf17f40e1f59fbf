"""The verdict of a compare, as data: one record per measured op, value size and metric (p50, p99,
TPS), with what changed, whether it is significant and by which rule, what led the change, the
intervention's slope and the what-if's verdict. Reporters print these first and nothing in them
is prose but the labels: every figure is a field, and the rule and the lag's note are records the
reporters word (reporters/claims.py; docs/report-json.md, compare.verdict[]).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from valkeytrace.analysis import model
from valkeytrace.analysis import launches as ln
from valkeytrace.analysis import replication
from valkeytrace.analysis.note import Clause, Rule
from valkeytrace.analysis.tables import MEASURED_OP, MIN_EFFECT, delta_pct, path_bound
from valkeytrace.workloads import REPLICA_OP

# the mean beside the percentiles: a p50 can lie on another path of the server from launch to
# launch (one fsync cycle per request or two), the mean cannot (Little's law: the clients'
# requests in flight are fixed), so it is the measure where the p50 is bimodal
VERDICT_METRICS = ("p50_us", "p99_us", "mean_us", "tps")
# the change the launches should resolve: a verdict that is not significant says how many launches
# a side would bring its 95% interval's half-width under this
DETECT_PCT = 10.0


@dataclass
class Slope:
    """The intervention's least-squares slope (ms of the metric per ms of fsync), and whether it is
    stated at all (sensitivity.reliable)."""
    thread_role: str
    value: float
    r2: float
    reliable: bool
    points: list


@dataclass
class WhatIf:
    predicted: float
    measured: float
    error_pct: float
    tolerance_pct: float
    verdict: str  # "inside" or "outside" the 90% interval ("" without one)
    interval: list | None = None  # [lo, hi]: the prediction's 90% interval for one recording


@dataclass
class Verdict:
    workload: str
    op: str
    value_size: int
    metric: str
    base: float | None
    cand: float | None
    change_pct: float | None
    significant: bool | None
    rule: Rule                        # how significance was decided (or why it is unknown)
    n: list                           # repeats [baseline, candidate]
    leading_component: str | None = None
    leading_label: str | None = None
    explained_share: float | None = None
    bimodal: bool = False             # a side's repeats lie on different paths of the server
    slope: Slope | None = None        # the baseline's intervention slope for this metric
    whatif: WhatIf | None = None      # the baseline's prediction of this metric against the candidate
    interval_pct: list | None = None  # 95% interval of the change, from the launches (compare)
    launches: list | None = None      # server launches [baseline, candidate]
    launches_needed: int | None = None  # a side, for a 95% interval of +-DETECT_PCT (when not significant)
    note: LagNote | None = None       # replication: what the lag's change is made of (lag_note)
    rate: float | None = None         # open loop: the cell's offered rate
    saturated: list | None = None     # open loop: [baseline, candidate] saturated at that rate

    @property
    def finding(self) -> str:
        """The verdict's stable code: change.significant / change.not_significant / change.unknown."""
        if self.significant is None:
            return "change.unknown"
        return "change.significant" if self.significant else "change.not_significant"

    def as_json(self, rule: str, note: str | None) -> dict:
        """The verdict's JSON, with the reporter's words for its rule and its note (rule_code: the
        rule's code)."""
        out = {"finding": self.finding, **asdict(self)}
        out.update(rule=rule, note=note, rule_code=self.rule.code)
        return out


def rule_of(row, metric: str, sig: bool | None) -> Rule:
    b, c = row.base, row.cand
    iv = row.interval.get(metric)
    n = [b.n, c.n]
    if iv is not None:
        return Rule("rule.launches", n, list(iv.launches))
    if sig is None:
        return Rule("rule.unknown", n)
    if metric == "p50_us" and path_bound(b, c) and sig is False:
        return Rule("rule.paths", n)
    return Rule("rule.repeats", n, min_effect=MIN_EFFECT)


def reliable(points: list, r2: float, min_r2: float = 0.8) -> bool:
    """A slope is stated only when its fit is good and its points move one way: R² >= min_r2 and
    the metric monotonic in the fsync time (ties allowed)."""
    if r2 is None or r2 < min_r2 or len(points) < 3:
        return False
    ys = [y for _, y in sorted(points)]
    up = all(b >= a for a, b in zip(ys, ys[1:]))
    down = all(b <= a for a, b in zip(ys, ys[1:]))
    return up or down


def build(comparison, explanation: list, base_sensitivity: list, whatif_checked: list | None) -> list[Verdict]:
    """One Verdict per measured op (GET in read-heavy, SET in write-only), size and metric."""
    if comparison is None:
        return []
    entries = {e.key: e for e in explanation or []}
    slopes: dict = {}
    for s in base_sensitivity or []:
        key = (s.workload, s.op, s.value_size, s.metric)
        if key not in slopes or s.thread_role == "main":
            slopes[key] = s
    checks = {w.key: w for w in whatif_checked or []}
    out = []
    for row in comparison.rows:
        if row.op not in (MEASURED_OP.get(row.workload), REPLICA_OP):
            continue
        for metric in VERDICT_METRICS:
            check_key = (row.workload, row.op, row.value_size, row.rate, metric)
            sig = row.significant[metric]
            b, c = row.base.get(metric), row.cand.get(metric)
            d = delta_pct(b, c)
            v = Verdict(row.workload, row.op, row.value_size, metric, b, c,
                        None if d is None else round(d, 2), sig,
                        rule_of(row, metric, sig), [row.base.n, row.cand.n],
                        bimodal=metric == "p50_us" and path_bound(row.base, row.cand), rate=row.rate,
                        saturated=[row.base.saturated, row.cand.saturated] if row.rate else None)
            iv = row.interval[metric]
            if iv is not None:
                v.change_pct, v.interval_pct, v.launches = iv.change_pct, iv.interval_pct, iv.launches
                lb, lc = row.base.launch_values[metric], row.cand.launch_values[metric]
                v.bimodal = metric == "p50_us" and any(max(x) >= 1.5 * min(x) > 0 for x in (lb, lc))
                if not iv.significant:
                    v.launches_needed = ln.launches_needed(lb, lc, DETECT_PCT)
            e = entries.get(check_key)
            if e is not None and e.leading_component:
                v.leading_component = e.leading_component
                v.leading_label = model.LABELS.get(e.leading_component, e.leading_component)
                v.explained_share = e.explained_share
            s = slopes.get((row.workload, row.op, row.value_size, metric))
            if s is not None:
                v.slope = Slope(s.thread_role, s.slope, s.r2, bool(s.reliable), s.points)
            w = checks.get(check_key)
            if w is not None and w.measured and w.error_pct is not None:
                v.whatif = WhatIf(w.predicted, w.measured, w.error_pct, w.tolerance_pct, w.verdict or "", w.interval)
            out.append(v)
    out.extend(replication_verdicts(comparison))
    return out


REPLICATION_OP = "replication"  # the op of a replication verdict (metric waitaof_p50_us, waitaof_p99_us, lag_p50_us)


@dataclass
class LagJobs:
    waited: float
    job_ms: float
    thread: str


@dataclass
class EarlyStream:
    side: str
    propagated: int
    checked: int | None


@dataclass
class LagNote(Clause):
    """The lag's change in the jobs each side's writes waited for (the stream leaves when the write's
    job has ended, as the SET's reply does), and each side's cap witness (early: stream writes that
    reached the replica before they were durable)."""
    CODE = "replication.lag"
    lag_us: list
    after_durable_us: list
    jobs: list | None = None       # [LagJobs baseline, LagJobs candidate]
    early: list = field(default_factory=list)   # [EarlyStream]


def lag_note(row) -> LagNote | None:
    b, c, bd, cd = row.base, row.cand, row.base_durability, row.cand_durability
    if b.lag_p50_us is None or c.lag_p50_us is None:
        return None
    jobs = None
    if bd and cd and bd.jobs_waited_per_write and cd.jobs_waited_per_write and bd.job_ms_p50 and cd.job_ms_p50:
        jobs = [LagJobs(d.jobs_waited_per_write, d.job_ms_p50, d.thread) for d in (bd, cd)]
    return LagNote([b.lag_p50_us, c.lag_p50_us], [b.lag_after_durable_p50_us or 0, c.lag_after_durable_p50_us or 0],
                   jobs, [EarlyStream(side, r.early_propagated, r.early_checked)
                          for side, r in (("baseline", b), ("candidate", c)) if r.early_propagated is not None])


def replication_verdicts(comparison) -> list[Verdict]:
    """A verdict per replication metric of each cell both sides replicated (compare --replicas)."""
    out = []
    for row in getattr(comparison, "replication", None) or []:
        note = lag_note(row)
        for metric in replication.METRICS:
            b, c = getattr(row.base, metric), getattr(row.cand, metric)
            if b is None and c is None:
                continue
            d = row.deltas.get(metric)
            out.append(Verdict(row.workload, REPLICATION_OP, row.value_size, metric, b, c,
                               None if d is None else round(d, 2), row.significant[metric], row.rule[metric],
                               [len(row.base.per_run.get(metric) or []), len(row.cand.per_run.get(metric) or [])],
                               note=note if metric == "lag_p50_us" else None))
    return out


@dataclass
class Finding:
    """One distinct finding behind the verdict: the cells (p50 changes) it covers and the servers'
    own facts for the first of them (where the fsyncs ran, what the main thread did)."""
    kind: str          # a leading component (model.COMPONENTS), or "no_change", "unknown", "unattributed"
    cells: list
    sides: list


def findings(verdicts: list[Verdict], explanation: list) -> list[Finding]:
    """The p50 verdicts grouped by what explains them, in the order they first appear."""
    entries = {e.key: e for e in explanation or []}
    groups: dict[str, Finding] = {}
    for v in verdicts:
        if v.metric != "p50_us":
            continue
        if v.significant is None:
            kind = "unknown"
        elif not v.significant:
            kind = "no_change"
        else:
            kind = v.leading_component or "unattributed"
        f = groups.setdefault(kind, Finding(kind, [], []))
        f.cells.append(f"{v.workload} {v.op} {v.value_size} B" + (f" @ {v.rate:,.0f}/s" if v.rate else ""))
        e = entries.get((v.workload, v.op, v.value_size, v.rate, v.metric))
        if not f.sides and e is not None:
            f.sides = list(e.sides)
    return list(groups.values())
