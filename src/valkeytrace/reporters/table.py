"""analysis/fleet.py's rows as a file other tools read: CSV (a header of the column names, empty for a
missing figure) or Parquet (typed columns, through pyarrow: the optional extra valkeytrace[parquet])."""
from __future__ import annotations

import csv

from valkeytrace.analysis.fleet import COLUMNS, TableRow, column_types

ARROW_TYPES = {int: "int64", float: "float64", str: "string", bool: "bool_"}


def write_csv(rows: list[TableRow], out) -> None:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow(["" if (v := getattr(r, c)) is None else _csv(v) for c in COLUMNS])


def _csv(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)  # a float whole (repr: the shortest that reads back)


def write_parquet(rows: list[TableRow], path: str) -> None:
    """Raises ImportError without pyarrow (the caller names the extra)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = column_types()
    schema = pa.schema([(c, getattr(pa, ARROW_TYPES[types[c]])()) for c in COLUMNS])
    table = pa.table({c: [getattr(r, c) for r in rows] for c in COLUMNS}, schema=schema)
    pq.write_table(table, path)
