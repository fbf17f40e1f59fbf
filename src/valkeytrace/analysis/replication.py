"""record --replicas (and valkeytrace merge): what a write takes to be durable on the primary and on
its replicas. From the durability probe's own timings (runs[].replication: SET, then WAITAOF 1 N)
and from the kernel events of every node's window (analysis/replink.py: the link joined by the
replication stream's offsets).

- waitaof_p50_us / p99: the probe's SET sent -> its WAITAOF answered (the client's clock); with no
  probe (a merged recording of observed nodes), the server's span of each SET + WAITAOF pair;
- components_us: the probes around the median (WAITAOF within its 40th-60th percentiles), each
  decomposed from the kernel (replink.components), their mean per part; client_us is the rest of
  the client's time (its own send and read, the loopback), so the parts add up to what it saw;
- lag_p50_us: a write read by the primary (run, and handed to its AOF, in that loop iteration)
  -> the stream bytes that carry it arriving on the replica (every SET in the window, not only the
  probe's); lag_after_durable_p50_us: from the primary's sync that made it durable;
- early_propagated: link writes the replica read before the primary had made them durable (the
  cap's witness, replink.link), over early_checked.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from valkeytrace.analysis import replink
from valkeytrace.analysis.intervals import ALPHA
from valkeytrace.analysis.server import summarize_server
from valkeytrace.recording.model import Replication as ReplicationProbe
from valkeytrace.recording.model import Run, decode_as
from valkeytrace.analysis.summary import ServerSummary
from valkeytrace.analysis.note import Rule


# components_us' parts, in the chain's order, as the reports name them
COMPONENT_LABELS = {
    "primary_durability_us": "the primary's durability (its SET's arrival -> its AOF sync's end)",
    "link_us": "the link (-> the stream's bytes arrive on the replica)",
    "replica_apply_us": "the replica's apply (-> its AOF write: its main thread reaching the bytes, running them)",
    "replica_aof_us": "the replica's AOF write + fsync",
    "replica_ack_us": "the replica's ack (-> written; its wait for the primary's GETACK included)",
    "ack_read_us": "the ack's way back (-> read by the primary)",
    "primary_reply_us": "the primary's reply (-> the WAITAOF answered: its loop, its next sync included)",
    "client_us": "the probe client (its own send and read, the loopback)",
}


@dataclass
class Replication:
    probes: int
    replicas: int
    waitaof_p50_us: float | None
    waitaof_p99_us: float | None
    set_p50_us: float | None
    acked_all_share: float | None       # probes whose WAITAOF counted every replica
    lag_p50_us: float | None = None
    lag_p99_us: float | None = None
    lag_after_durable_p50_us: float | None = None
    lag_writes: int = 0                 # writes the lag is measured over
    early_propagated: int | None = None  # None: no link events to witness with
    early_checked: int = 0
    # what a replica held that the primary had not made durable (the kernel's timestamps): {writes (checked),
    # writes_seen_dirty (their bytes reached the replica before the primary's sync ended), window_p50_us,
    # window_p99_us (that sync's end - the arrival; 0 for a clean write), reads, reads_checked, reads_dirty
    # (--replica-get-clients: _reads below; null without readers)}
    dirty: dict | None = None
    # a stream that leaves at once (writes seen dirty): the lag p50 it would have if it waited for durability
    # (--offload-replicas committed), per write its primary's sync plus its link transit (replink.committed_lag_ns)
    committed_lag_p50_us: float | None = None
    components_us: dict = field(default_factory=dict)
    decomposed: int = 0                 # probes decomposed (of `probes`)
    undecomposed: int = 0               # probes whose chain was out of order or incomplete
    source: str = "probe"               # probe, or kernel (no probe: a merged recording's pairs)
    unjoined_windows: int = 0           # replica windows whose offsets could not be joined (it lagged)
    lost_events: int = 0                # ring-buffer events lost in the nodes' windows (a lost write breaks the join)
    errors: list = field(default_factory=list)
    # what compare tests (not in the JSON): each run's figure, and the pooled samples
    per_run: dict = field(default_factory=dict, repr=False)
    samples: dict = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("per_run")
        d.pop("samples")
        return d


def replica_summaries(runs: list) -> list[ServerSummary]:
    """Each replica's server summary over a cell's ok runs (replica i of every run together)."""
    runs = [decode_as(r, Run) for r in runs]
    n = max((len(r.replicas) for r in runs), default=0)
    out = []
    for i in range(n):
        s = summarize_server([r.replicas[i] for r in runs if len(r.replicas) > i])
        if s is not None:
            out.append(s)
    return out


def _p(xs, q):
    return float(np.percentile(xs, q)) if len(xs) else None


def _links(runs: list[Run]) -> list[tuple[Run, list]]:
    """Per ok run with windows of its nodes: (run, [replink.Link per replica])."""
    out = []
    for r in runs:
        primary = replink.node_events(r.server)
        if primary is None or r.server is None:
            continue
        links = []
        p0 = r.server.start_mono_ns or 0
        for w in r.replicas:
            ev = replink.node_events(w)
            lk = None
            if ev is not None:
                w0 = w.start_mono_ns or 0
                lo = max(p0, w0)
                hi = min(p0 + r.server.window_ns, w0 + w.window_ns)
                lk = replink.link(primary.within(lo, hi), ev.within(lo, hi)) if hi > lo else None
            if lk is not None:
                links.append(lk)
        if links:
            out.append((r, links))
    return out


def _probe_chains(run: Run, links: list) -> list[tuple[float, dict]]:
    """(client WAITAOF µs, parts) per probe matched with its kernel chain: the chain of the
    replica the WAITAOF waited for (its sync ended last), the probe by its SET's send."""
    probe = run.replication or ReplicationProbe()
    by_p0: dict = {}
    for lk in links:
        for p0, pts in lk.chains:
            if p0 not in by_p0 or pts[5] > by_p0[p0][5]:
                by_p0[p0] = pts
    if not by_p0:
        return []
    p0s = np.array(sorted(by_p0), dtype=np.int64)
    out = []
    for sent, total in zip(probe.sent_ns, probe.waitaof_us):
        i = np.searchsorted(p0s, sent, side="left")
        if i >= len(p0s):
            continue
        pts = by_p0[int(p0s[i])]
        if (pts[8] - sent) / 1e3 > total + 50:  # the next probe's chain, not this one's
            continue
        parts = replink.components(pts)
        parts[CLIENT] = total - (pts[8] - pts[0]) / 1e3
        out.append((total, parts))
    return out


CLIENT = "client_us"  # the client's own part of a WAITAOF, beside the kernel's components


def _middle(parts: list[tuple[float, dict]]) -> dict:
    totals = np.array([t for t, _ in parts])
    lo, hi = np.percentile(totals, 40), np.percentile(totals, 60)
    mid = [p for t, p in parts if lo <= t <= hi] or [p for _, p in parts]
    return {k: round(float(np.mean([p[k] for p in mid])), 1) for k in mid[0]}


def _reads(runs: list[Run]) -> dict:
    """replication.dirty's reads: the replica readers' GETs (--replica-get-clients), and of those the kernel shows
    answered before the primary could have made their value durable (replink.dirty_reads), over the logged sample
    (every log_stride-th read) scaled back to the reads."""
    rr = [(r, r.replica_reads) for r in runs if r.replica_reads is not None and r.server is not None]
    if not rr:
        return {"reads": None, "reads_dirty": None}
    checked = dirty = 0
    for r, x in rr:
        primary = replink.node_events(r.server)
        if primary is None:
            continue
        c, d = replink.dirty_reads(primary, np.asarray(x.log.get("write_ns", []), dtype=np.int64),
                                   np.asarray(x.log.get("recv_ns", []), dtype=np.int64))
        checked, dirty = checked + c * x.log_stride, dirty + d * x.log_stride
    return {"reads": sum(x.reads for _, x in rr), "reads_checked": checked, "reads_dirty": dirty}


def replication(runs: list, replicas: list[ServerSummary]) -> Replication | None:
    runs = [decode_as(r, Run) for r in runs]
    probes = [r.replication for r in runs if r.replication]
    links = _links(runs)
    if not probes and not links:
        return None
    wait = np.array([x for p in probes for x in p.waitaof_us], dtype=float)
    sets = np.array([x for p in probes for x in p.set_us], dtype=float)
    acked = [a for p in probes for a in p.acked]
    n = max([int(p.replicas or 0) for p in probes] + [len(lk) for _, lk in links])
    rec = Replication(probes=len(wait), replicas=n, waitaof_p50_us=_p(wait, 50), waitaof_p99_us=_p(wait, 99),
                      set_p50_us=_p(sets, 50), acked_all_share=(sum(a >= n for a in acked) / len(acked)) if acked else None,
                      errors=sorted({p.error for p in probes if p.error}))
    per_probe = [np.asarray(p.waitaof_us, dtype=float) for p in probes if p.waitaof_us]
    rec.per_run = {"waitaof_p50_us": [_p(x, 50) for x in per_probe], "waitaof_p99_us": [_p(x, 99) for x in per_probe],
                   "lag_p50_us": [_p(np.concatenate([lk.lag_ns for lk in ls]) / 1e3, 50) for _, ls in links
                                  if sum(len(lk.lag_ns) for lk in ls)]}
    rec.samples = {"waitaof_p50_us": wait, "waitaof_p99_us": wait}
    if not links:
        return rec
    lag = np.concatenate([lk.lag_ns for _, ls in links for lk in ls]) / 1e3
    lag_d = np.concatenate([lk.lag_after_durable_ns for _, ls in links for lk in ls]) / 1e3
    rec.lag_p50_us, rec.lag_p99_us, rec.lag_writes = _p(lag, 50), _p(lag, 99), int(len(lag))
    rec.lag_after_durable_p50_us = _p(lag_d, 50)
    rec.samples["lag_p50_us"] = lag
    rec.early_propagated = sum(lk.early for _, ls in links for lk in ls)
    rec.early_checked = sum(lk.checked for _, ls in links for lk in ls)
    window = np.concatenate([lk.dirty_window_ns for _, ls in links for lk in ls]) / 1e3
    checked = sum(lk.dirty_checked for _, ls in links for lk in ls)
    # the exposure over every write checked: 0 for one whose bytes arrived after it was durable
    exposure = np.concatenate([window, np.zeros(max(0, checked - len(window)))])
    committed = np.concatenate([lk.committed_lag_ns for _, ls in links for lk in ls]) / 1e3
    rec.committed_lag_p50_us = _p(committed, 50) if len(committed) >= 0.5 * max(checked, 1) else None
    rec.dirty = {"writes": checked, "writes_seen_dirty": int(len(window)),
                 "window_p50_us": _p(exposure, 50), "window_p99_us": _p(exposure, 99), **_reads(runs)}
    rec.undecomposed = sum(lk.undecomposed for _, ls in links for lk in ls)
    rec.unjoined_windows = sum(not lk.joined for _, ls in links for lk in ls)
    rec.lost_events = sum(int((r.server.lost_events if r.server else 0) or 0)
                          + sum(int(w.lost_events or 0) for w in r.replicas) for r, _ in links)
    if probes:
        parts = [x for r, ls in links for x in _probe_chains(r, ls)]
    else:  # no probe: the server's span of each SET + WAITAOF pair is the total
        rec.source = "kernel"
        parts = [((pts[8] - pts[0]) / 1e3, replink.components(pts)) for _, ls in links for lk in ls for _, pts in lk.chains]
        spans = np.array([t for t, _ in parts])
        rec.probes, rec.waitaof_p50_us, rec.waitaof_p99_us = len(spans), _p(spans, 50), _p(spans, 99)
        rec.samples.update(waitaof_p50_us=spans, waitaof_p99_us=spans)
    rec.decomposed = len(parts)
    if parts:
        rec.components_us = _middle(parts)
    return rec


METRICS = ("waitaof_p50_us", "waitaof_p99_us", "lag_p50_us")


def significance(a: Replication, b: Replication, metric: str, min_effect: float) -> tuple[bool | None, Rule]:
    """(significant, how it was decided) for a change of metric from a to b: unknown below 2 runs a
    side; not significant under min_effect; significant when the runs' ranges are apart; else a
    Mann-Whitney test of the pooled samples (probes, or writes for the lag) at ALPHA, the medians'
    direction agreeing with the change."""
    va, vb = getattr(a, metric), getattr(b, metric)
    ra, rb = [x for x in a.per_run.get(metric) or [] if x is not None], [x for x in b.per_run.get(metric) or [] if x is not None]
    if va is None or vb is None or len(ra) < 2 or len(rb) < 2:
        return None, Rule("rule.runs_few")
    if va == 0 or abs(vb - va) < min_effect * abs(va):
        return False, Rule("rule.under", min_effect=min_effect)
    if max(ra) < min(rb) or max(rb) < min(ra):
        return True, Rule("rule.ranges_apart")
    xa, xb = a.samples.get(metric), b.samples.get(metric)
    if metric.endswith("p99_us") or xa is None or xb is None or len(xa) < 10 or len(xb) < 10:
        return False, Rule("rule.ranges_overlap")  # a rank test speaks of the middle, not of a tail
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(xa, xb).pvalue)
    if (np.median(xb) - np.median(xa)) * (vb - va) <= 0:
        return False, Rule("rule.medians_against")
    return bool(p < ALPHA), Rule("rule.mann_whitney", p=p)
