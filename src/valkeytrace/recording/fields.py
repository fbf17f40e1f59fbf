"""The recording model's building blocks (recording/model.py): the declared record's base and the
bounded number types its fields use."""
from __future__ import annotations

from typing import Annotated, Any

import msgspec

from valkeytrace.layout import HIST_BUCKETS

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
NonNeg = Annotated[float, msgspec.Meta(ge=0)]
U64 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # msgspec bounds fit an int64
Cpu = Annotated[int, msgspec.Meta(ge=0, le=1 << 20)]
Bucket = tuple[Annotated[int, msgspec.Meta(ge=0, le=HIST_BUCKETS - 1)], Annotated[int, msgspec.Meta(ge=0, le=1 << 62)]]


class Record(msgspec.Struct, kw_only=True):
    """A declared record: fields by keyword, defaults left out when encoded."""


def _d() -> Any:
    return msgspec.field(default_factory=dict)


def _l() -> Any:
    return msgspec.field(default_factory=list)
