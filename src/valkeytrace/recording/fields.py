"""The recording model's building blocks (recording/model.py): the declared record's base and the
bounded number types its fields use."""
from __future__ import annotations

from typing import Annotated, Any

import msgspec
import numpy as np

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


def plain(x: Any, ti: Any) -> Any:
    """The document with a null or an empty object in a record's field read as absent (its default);
    entries of a mapping (a cell's ops, a thread's calls) are kept as they are, null included."""
    import msgspec.inspect as mi

    if isinstance(x, np.generic):  # a figure computed in memory (the recorder's, a test's): a plain number
        return x.item()
    if isinstance(x, msgspec.Raw):  # a part the recorder keeps encoded (a window's blocked timeline)
        x = msgspec.json.decode(x)
    if isinstance(ti, mi.UnionType):
        for t in ti.types:
            if isinstance(x, dict) and isinstance(t, (mi.StructType, mi.DictType)):
                return plain(x, t)
            if isinstance(x, list) and isinstance(t, mi.ListType):
                return plain(x, t)
        return x
    if isinstance(ti, mi.StructType) and isinstance(x, dict):
        types = {f.encode_name: f for f in ti.fields}
        out = {}
        for k, v in x.items():
            f = types.get(k)
            if f is None:
                continue  # not declared: not read
            if (v is None or v == {}) and not f.required:
                continue
            out[k] = plain(v, f.type)
        return out
    if isinstance(ti, mi.DictType) and isinstance(x, dict) and isinstance(ti.value_type, (mi.StructType, mi.UnionType)):
        return {k: v if v is None else plain(v, ti.value_type) for k, v in x.items()}
    if isinstance(ti, mi.ListType) and isinstance(x, list) and isinstance(ti.item_type, (mi.StructType, mi.UnionType)):
        return [plain(v, ti.item_type) for v in x]
    if isinstance(x, list) and x and isinstance(x[0], np.generic):
        return [v.item() if isinstance(v, np.generic) else v for v in x]
    return x
