"""One or two recordings, analysed: everything a reporter shows, computed here.

Reporters (reporters/) render a ReportInput and never read a recording's raw runs: the tables
(analysis/tables.py), the server-side summaries (analysis/server.py), the explanation
(analysis/explain.py), the what-if and the intervention (whatif.py, sensitivity.py), and the
data the plots draw (analysis/distributions.py) all come from here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import msgspec

from valkeytrace.analysis import (curve, distributions, explain, facts, memory, offload, seed, sensitivity, trade,
                                  tracer_cost, verdict, whatif)
from valkeytrace.analysis.note import Note
from valkeytrace.analysis.server import backend_disagreements, missed_fsyncs, schedstat_disagreements, stalls
from valkeytrace.analysis.tables import CellSummary, Comparison, compare, summarize
from valkeytrace.recording.model import Client, Document, ServerInfo, Settings, decode


@dataclass
class ServerExitRecord:
    """A run the server's end cut short (runs[].server_exit): what every report says first."""
    workload: str
    value_size: int
    repeat: int | None
    launch: int | None
    at_s: float | None
    in_window: bool
    signal: str | None
    status: int | None
    cause: str | None

    def to_json(self) -> dict:
        out = asdict(self)
        for k in ("signal", "status", "cause"):
            if out[k] is None:
                del out[k]
        return out


@dataclass
class Problem:
    """A run that did not finish."""
    workload: str
    value_size: int
    repeat: int | None
    status: str
    error: str | None


@dataclass
class AnalysedRun:
    path: str
    doc: Document
    cells: list[CellSummary]
    explanation: list = field(default_factory=list)  # explain.explain_run entries
    server_views: dict = field(default_factory=dict)  # cell key -> facts.ServerViewGap
    sensitivity: list = field(default_factory=list)  # sensitivity.sensitivity entries
    memory: dict = field(default_factory=dict)  # cell key -> memory.CellMemory
    tracer_cost: dict = field(default_factory=dict)  # cell key -> tracer_cost.CellCost

    @property
    def label(self) -> str:
        return self.doc.label

    @property
    def tracer(self) -> dict | None:
        """runs[].tracer of the report: the tracer's own cost over every window (analysis/tracer_cost.run_cost)."""
        cost = tracer_cost.run_cost([r for r in self.doc.runs if r.status == "ok"])
        return None if cost is None else {"cost": cost}

    @property
    def durability_check(self):
        """--verify-durability's result (recording.model.DurabilityCheck), or None."""
        return memory.durability_check(self.doc.runs)

    @property
    def server(self) -> ServerInfo:
        return self.doc.server

    @property
    def emulation(self) -> str:
        """The sentence every report must show when the fsync latency was emulated, else ''."""
        return self.doc.emulation.description or ""

    @property
    def emulation_spec(self) -> dict | None:
        """The recording's emulation, its virtual offload's figures derived here (analysis/offload.py)."""
        emu = msgspec.to_builtins(self.doc.emulation)
        s = offload.summary(self.doc)
        return emu if s is None else {**emu, "offload": s.to_json()}

    @property
    def client(self) -> Client:
        return self.doc.client

    @property
    def settings(self) -> Settings:
        return self.doc.settings

    @property
    def nodes(self) -> list:
        """record --replicas: the primary and its replicas (role, pid, port, version, config)."""
        return self.doc.nodes

    @property
    def cluster(self):
        """record --cluster: its shards and nodes (recording.model.Cluster), or None."""
        return self.doc.cluster

    @property
    def failover(self):
        """record --failover: the last run's (recording.model.Failover), or None."""
        return next((r.failover for r in reversed(self.doc.runs) if r.failover is not None), None)

    @property
    def complete(self) -> bool:
        return self.doc.complete

    @property
    def warnings(self) -> list[Note]:
        """The recording's own, then what the analysis finds inconsistent in it (codes and figures:
        reporters/sentences.py words them)"""
        own = [Note("recorded", {"text": w}) if isinstance(w, str) else Note(w.code, dict(w.figures))
               for w in self.doc.warnings]
        return (own + stalls(self.doc) + missed_fsyncs(self.doc)
                + schedstat_disagreements(self.doc) + backend_disagreements(self.doc) + offload.exit_warnings(self.doc))

    @property
    def server_exits(self) -> list[ServerExitRecord]:
        """The runs the server's end cut short (runs[].server_exit), first of all a report says."""
        return [ServerExitRecord(r.workload, r.value_size, r.repeat, r.launch, e.at_s, e.in_window, e.signal, e.status,
                                 e.cause) for r in self.doc.runs if (e := r.server_exit)]

    @property
    def overhead(self):
        return self.doc.overhead

    @property
    def problems(self) -> list[Problem]:
        """The runs that did not finish: workload, value_size, repeat, status, error."""
        return [Problem(r.workload, r.value_size, r.repeat, r.status, r.error) for r in self.doc.runs if r.status != "ok"]

    # what the plots draw
    def latency_cdfs(self, workload: str, size: int, op: str) -> list:
        return distributions.cell_cdfs(self.doc, workload, size, op)

    def sync_histograms(self, workload: str, size: int) -> dict:
        return distributions.role_sync_histograms(self.doc, workload, size)

    def first_blocked_timeline(self, seconds: float):
        return distributions.first_blocked_timeline(self.doc, seconds)


@dataclass
class ReportInput:
    runs: list[AnalysedRun]
    comparison: Comparison | None = None
    explanation: list | None = None  # explain.explain_compare entries (with --compare)
    whatif: list | None = None       # the baseline's what-if against the candidate (whatif.check)
    verdict: list | None = None      # verdict.Verdict records (with --compare): what every report prints first
    seed_notes: dict | None = None   # workload -> seed.SeedNote: the seed's table and this host's row of it (compare)
    curves: list | None = None       # curve.Curve per side, op and size: open-loop recordings at two rates or more
    trades: list | None = None       # trade.ReplicaTrade per cell both sides replicated (compare)
    detail: bool = False             # report --detail: the per-thread tables and the full accounting too

    @property
    def baseline(self):
        return self.runs[0]

    @property
    def candidate(self):
        return self.runs[1] if len(self.runs) > 1 else None


def _curves(runs: list) -> list:
    out = []
    for r in runs:
        out += curve.curves(r.label, r.cells, float(r.settings.duration_s or 1.0))
    return out


def analyse(paths_and_docs: list[tuple], with_whatif: bool = True) -> ReportInput:
    """The report's typed records from one recording or two (a compare; with_whatif=False: no what-if)."""
    runs = []
    for p, raw_doc in paths_and_docs:
        d = decode(raw_doc)
        cells = summarize(d)
        views, mem, costs = {}, {}, {}
        for c in cells:
            raw = [r for r in d.runs if r.workload == c.workload and r.value_size == c.value_size
                   and (r.load.rate if r.load else None) == c.rate and r.status == "ok"]
            gap = facts.server_view_gap(raw, c)
            if gap:
                views[c.key] = gap
            held, cost = memory.cell_memory(raw), tracer_cost.cell_cost(raw)
            if held is not None:
                mem[c.key] = held
            if cost is not None:
                costs[c.key] = cost
        sens = sensitivity.sensitivity(d)
        runs.append(AnalysedRun(p, d, cells, explain.explain_run(cells, d, sens), views, sens, mem, costs))
    comparison = explanation = checked = verdicts = None
    if len(runs) == 2:
        comparison = compare(runs[0].cells, runs[1].cells, runs[0].label, runs[1].label)
        explanation = explain.explain_compare(runs[0].cells, runs[1].cells, comparison, runs[0].doc, runs[1].doc,
                                              (runs[0].sensitivity, runs[1].sensitivity))
        # the baseline's prediction of the candidate's configuration (nothing when the model does not
        # cover what differs: another build, other I/O threads; or when nothing it sees differs)
        checked = whatif.check(runs[0].doc, runs[1].doc, runs[1].cells) if with_whatif else None
        verdicts = verdict.build(comparison, explanation, runs[0].sensitivity, checked)
        notes = seed.table_notes(comparison, explanation, runs[0].cells, runs[1].cells)
        return ReportInput(runs, comparison, explanation, checked, verdicts, seed_notes=notes, curves=_curves(runs),
                           trades=trade.trades(runs[0], runs[1], comparison))
    return ReportInput(runs, comparison, explanation, checked, verdicts, curves=_curves(runs))
