"""An explanation entry (analysis/explain.py builds them; verdict.py, seed.py and the reporters read
them by attribute): one measured op's metric in one cell, what was found (a stable code), the claim
as clauses (typed codes and figures, in the order it says them; reporters/claims.py words them), the
facts each side stands on, the model's accounting and the caveats as records. to_json() is the
report's JSON entry (docs/report-json.md: runs[].explanation[], compare.explanation[]), given the
reporter's words for the claim, the sides and the caveats.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass

from valkeytrace.analysis.facts import Caveat


@dataclass
class Entry:
    workload: str
    op: str
    value_size: int
    metric: str
    finding: str                  # a stable code: p50.where, change.led_by.fsync, group_commit, ...
    clauses: list                 # [note.Clause]: what the claim says, in order (reporters/claims.py words it)
    rate: float | None = None     # open loop: the cell's rate
    sides: list = field(default_factory=list)            # [note.Clause]: the servers' own facts, a clause or more a side
    evidence: dict = field(default_factory=dict)         # the figures the claim stands on (JSON)
    significant: bool | None = None
    components: list = field(default_factory=list)       # [model.Contribution] (compare) or [Part] (one recording)
    leading_component: str | None = None
    explained_share: float | None = None
    server_share: float | None = None
    caveat_records: list[Caveat] = field(default_factory=list)
    notes: list = field(default_factory=list)            # [note.Clause]: the clauses a tool reads (JSON notes[])
    compared: bool = True         # an entry of `report --compare` (else of one recording)

    def codes(self) -> list[str]:
        """The finding and every note's code: what a test or a tool asks of an entry."""
        return [self.finding] + [n.code for n in self.notes]

    def note(self, code: str):
        """The first note of that code, or None."""
        return next((n for n in self.notes if n.code == code), None)

    @property
    def cell(self) -> str:
        return f"{self.workload} {self.op} {self.value_size} B"

    @property
    def key(self) -> tuple:
        return (self.workload, self.op, self.value_size, self.rate, self.metric)

    def to_json(self, claim: str, sides: list[str], caveats: list[str]) -> dict:
        """The JSON entry, with the reporter's words: the claim, each side's and each caveat's."""
        out = {"workload": self.workload, "op": self.op, "value_size": self.value_size}
        if self.compared:
            out["rate"] = self.rate
        out.update(metric=self.metric, finding=self.finding, claim=claim)
        if self.compared and self.sides:
            out["sides"] = sides
        out.update(evidence=_plain(self.evidence), components=[_plain(c) for c in self.components],
                   leading_component=self.leading_component, explained_share=self.explained_share,
                   significant=self.significant)
        if self.compared:
            out["server_share"] = self.server_share
        out.update(caveat_records=[{"finding": c.finding, "label": c.label, "text": text, "figures": c.figures}
                                   for c, text in zip(self.caveat_records, caveats)],
                   caveats=[c.said(text) for c, text in zip(self.caveat_records, caveats)],
                   notes=[n.to_json() for n in self.notes])
        return out


@dataclass
class Part:
    """One recording's p50, one component of it (µs)."""
    name: str
    us: float


def _plain(x):
    """A payload's typed parts as their JSON (a record's to_json() where it has one)."""
    if hasattr(x, "to_json"):
        return x.to_json()
    if is_dataclass(x) and not isinstance(x, type):
        return asdict(x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
