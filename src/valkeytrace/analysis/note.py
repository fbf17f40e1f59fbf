"""A finding, caveat or warning as data: a stable code and the figures its sentence states. The
sentences are the reporters' (reporters/sentences.py); the analysis hands over only these."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Note:
    """One thing a report says, as data: a stable code and the figures its sentence states."""
    code: str
    figures: dict[str, Any] = field(default_factory=dict)
