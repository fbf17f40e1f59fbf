"""What a report says, as data: a finding, caveat, warning or a clause of a claim is a stable code and
the figures its sentence states. The sentences are the reporters' (reporters/sentences.py for the
warnings, reporters/claims.py for the explanation's clauses and caveats); the analysis hands over
only these. A warning is a Note (code and a mapping of figures, as the recording keeps it); a clause
is a typed record (Clause: its fields are its figures)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass
class Note:
    """One thing a report says, as data: a stable code and the figures its sentence states."""
    code: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Clause:
    """One clause of an explanation, typed: its code (CODE, or the field `kind` where one record
    says one of several codes) and its figures, the other fields (JSON: {"code", "figures"})."""
    CODE: ClassVar[str] = ""

    @property
    def code(self) -> str:
        return str(getattr(self, "kind", self.CODE))

    @property
    def figures(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("kind", None)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "figures": self.figures}


@dataclass
class Rule(Clause):
    """How a verdict's significance was decided (kind): rule.launches (the launches' 95% interval),
    rule.unknown (n < 2), rule.paths (repeats on different paths: no basis), rule.repeats (the
    repeats' floor, ranges or rank test); a replicated metric's: rule.runs_few, rule.under (under
    min_effect), rule.ranges_apart, rule.ranges_overlap, rule.medians_against, rule.mann_whitney (p)."""
    kind: str
    n: list = field(default_factory=list)
    launches: list | None = None
    min_effect: float | None = None
    p: float | None = None
