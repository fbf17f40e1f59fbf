"""The workloads, declared once: each one's name, the op it measures, the ops a run of it has,
its table's title and the note its first row carries (settings' keys in braces). The recorder's
scenarios (workload/scenarios.py, one class per name here), the tables (analysis/tables.py) and
the reporters read this registry; it imports nothing, so every layer may."""
from __future__ import annotations

from dataclasses import dataclass

SATURATED_SHARE = 0.99  # an open-loop op answered below this share of what was offered: saturated
REPLICA_OP = "REPLICA_GET"  # record --replica-get-clients: the replica readers' GETs, an op of write-only runs


@dataclass(frozen=True)
class Workload:
    name: str
    measured_op: str | None   # the op the #4029 table shows (None: no load)
    ops: tuple = ()           # every op a run of it records, measured first
    title: str | None = None  # the #4029 table's title
    note: str = ""            # its first row's note, settings' keys in braces


WORKLOADS = (
    Workload("read-heavy", "GET", ("GET", "SET"), "Read-heavy (GET + SET)",
             "GET c={get_clients} + c={set_clients} background SET"),
    Workload("write-only", "SET", ("SET", REPLICA_OP), "Write-only (SET)", "isolated SET c={write_clients}"),
    Workload("none", None),
)
BY_NAME = {w.name: w for w in WORKLOADS}
NAMES = tuple(w.name for w in WORKLOADS)
MEASURED_OP = {w.name: w.measured_op for w in WORKLOADS if w.measured_op}
OPS = {w.name: w.ops for w in WORKLOADS}
TABLED = tuple(w for w in WORKLOADS if w.title)  # the workloads a report has a table for, in order
