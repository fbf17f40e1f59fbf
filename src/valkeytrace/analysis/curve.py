"""The latency-throughput curve of open-loop recordings (record --rates): per side and measured op, one
point per rate (the achieved rate, the corrected p50 and p99, the service p50), and where the side
saturates: the highest rate it achieved within 1% with a bounded p99 (a p99 under a quarter of the
window: a queue that grew through the window is not a latency)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from valkeytrace.analysis.tables import MEASURED_OP, CellSummary
from valkeytrace.workloads import SATURATED_SHARE

BOUNDED_P99_SHARE = 0.25  # a p99 longer than this share of the window is the queue, not a latency


@dataclass
class Point:
    rate: float
    achieved_rate: float | None
    p50_us: float | None
    p99_us: float | None
    service_p50_us: float | None
    saturated: bool | None
    # a fixed pool's bound: its connections over the service p50 (Little's law, each connection one
    # request in flight): what a saturated point's achieved rate is held to
    pool_bound: float | None = None


@dataclass
class Curve:
    label: str
    workload: str
    op: str
    value_size: int
    points: list = field(default_factory=list)
    saturates_above: float | None = None   # the highest rate achieved within 1% with a bounded p99
    first_saturated: float | None = None   # the lowest rate it did not keep up with (None: it kept up with all)
    connections: int | None = None         # a fixed pool's connections (None: the pool grew)

    def to_json(self) -> dict:
        return asdict(self)


def curves(label: str, cells: list[CellSummary], window_s: float) -> list[Curve]:
    """One curve per (workload, value size) with two rates or more."""
    groups: dict = {}
    for c in cells:
        if c.rate and MEASURED_OP.get(c.workload) in c.ops:
            groups.setdefault((c.workload, c.value_size), []).append(c)
    out = []
    for (workload, size), cs in groups.items():
        op = MEASURED_OP[workload]
        cv = Curve(label, workload, op, size, connections=cs[0].connections if cs[0].pool == "fixed" else None)
        for c in sorted(cs, key=lambda x: x.rate or 0):
            o = c.ops[op]
            m = o.median
            bound = cv.connections * 1e6 / m.service_p50_us if cv.connections and m.service_p50_us else None
            cv.points.append(Point(c.rate or 0.0, m.achieved_rate, m.p50_us, m.p99_us, m.service_p50_us, o.saturated,
                                   bound))
        kept = [p for p in cv.points if kept_up(p, window_s)]
        cv.saturates_above = max((p.rate for p in kept), default=None)
        over = [p.rate for p in cv.points if not kept_up(p, window_s)]
        cv.first_saturated = min(over) if over else None
        out.append(cv)
    return out


def kept_up(p: Point, window_s: float) -> bool:
    """Achieved within 1% of the rate, and a p99 that is a latency, not the queue."""
    return (p.achieved_rate is not None and p.achieved_rate >= SATURATED_SHARE * p.rate and p.p99_us is not None
            and p.p99_us < BOUNDED_P99_SHARE * window_s * 1e6)
