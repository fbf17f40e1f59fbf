"""record --replicas: what a write takes to be durable on the primary and on its replicas, from the
durability probe's timings (runs[].replication: SET, then WAITAOF 1 N) and the replicas' own tracer
windows (runs[].replicas[]: each replica's server summary, as the primary's).

What is measured today: the WAITAOF time (a probe's SET sent -> its WAITAOF answered), the SET's
own (-> answered: durable on the primary), and each replica's fdatasync (its AOF job, from the
kernel). What is not yet: the link, the replica's apply and the ack, joined by the replication
offset; the lag from the primary's AOF job to the replica; #3381's cap. `components_us` names the
measured parts and keeps the rest as `not_decomposed_us`, never hidden in a part."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from valkeytrace.analysis.server import summarize_server
from valkeytrace.analysis.summary import ServerSummary


@dataclass
class Replication:
    probes: int
    replicas: int
    waitaof_p50_us: float | None
    waitaof_p99_us: float | None
    set_p50_us: float | None
    acked_all_share: float | None       # probes whose WAITAOF counted every replica
    lag_p50_us: float | None = None     # not measured yet (module docstring)
    early_propagated: int | None = None  # not measured yet: #3381's cap is not emulated
    components_us: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def replica_summaries(runs: list[dict]) -> list[ServerSummary]:
    """Each replica's server summary over a cell's ok runs (replica i of every run together)."""
    n = max((len(r.get("replicas") or []) for r in runs), default=0)
    out = []
    for i in range(n):
        s = summarize_server([(r.get("replicas") or [None] * n)[i] for r in runs if len(r.get("replicas") or []) > i])
        if s is not None:
            out.append(s)
    return out


def _p(xs, q):
    return float(np.percentile(xs, q)) if len(xs) else None


def replication(runs: list[dict], replicas: list[ServerSummary]) -> Replication | None:
    probes = [r["replication"] for r in runs if r.get("replication")]
    if not probes:
        return None
    wait = np.array([x for p in probes for x in p.get("waitaof_us") or []], dtype=float)
    sets = np.array([x for p in probes for x in p.get("set_us") or []], dtype=float)
    acked = [a for p in probes for a in p.get("acked") or []]
    n = max(int(p.get("replicas") or 0) for p in probes)
    rec = Replication(probes=len(wait), replicas=n, waitaof_p50_us=_p(wait, 50), waitaof_p99_us=_p(wait, 99),
                      set_p50_us=_p(sets, 50), acked_all_share=(sum(a >= n for a in acked) / len(acked)) if acked else None,
                      errors=sorted({p["error"] for p in probes if p.get("error")}))
    fsyncs = [t.fdatasync.p50_us for s in replicas for t in s.threads if t.fdatasync.count and t.fdatasync.p50_us]
    if rec.waitaof_p50_us is not None and rec.set_p50_us is not None:
        replica_fsync = max(fsyncs) if fsyncs else 0.0
        rest = rec.waitaof_p50_us - rec.set_p50_us - replica_fsync
        rec.components_us = {"primary_durability_us": round(rec.set_p50_us, 1),
                             "replica_fsync_us": round(replica_fsync, 1),
                             "not_decomposed_us": round(rest, 1)}  # link + apply + ack: not yet joined
    return rec
