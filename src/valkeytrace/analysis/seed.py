"""What the seed's two tables (valkey-io/valkey#4029, 64 B rows; ../shared/seed) imply, and which
mechanism a compare shows here: one SeedNote per table, from the comparison's own rows and the
durability records (the kernel's timestamps); reporters/sections.py puts it in words."""
from __future__ import annotations

from dataclasses import dataclass

from valkeytrace.analysis.facts import SeedPoint


@dataclass(frozen=True)
class SeedTable:
    op: str
    base: SeedPoint
    cand: SeedPoint


# the seed's published 64 B rows: baseline (upstream, appendfsync always) and #3381's offload
SEED = {"read-heavy": SeedTable("GET", SeedPoint(5450.0, 10263.0), SeedPoint(70670.0, 359.0)),
        "write-only": SeedTable("SET", SeedPoint(4840.0, 10831.0), SeedPoint(9020.0, 5463.0))}


P50 = "p50_us"


@dataclass(frozen=True)
class SeedNote:
    """A seed table against this host's first closed-loop row of it. mechanism: for GET, "led" (by
    `lead`, the explanation's leading component, `share` of the change durability work) or "none" (no
    significant change to explain); for SET, from the two sides' durability records: "cohorts" (the
    jobs a write waits changed), "job_length" (each job's length did), "neither", or "missing"."""
    workload: str
    seed: SeedTable
    value_size: int
    base_p50_us: float
    cand_p50_us: float
    base_tps: float
    cand_tps: float
    significant: bool | None
    mechanism: str
    lead: str | None = None
    share: float | None = None
    cohorts: tuple[int | None, int | None] | None = None  # SET: baseline -> candidate
    jobs_waited: tuple[float, float] | None = None
    job_ms: tuple[float | None, float | None] | None = None


def _get_mechanism(entry) -> dict:
    if not entry or not entry.leading_component or not entry.significant:
        return {"mechanism": "none"}
    return {"mechanism": "led", "lead": entry.leading_component, "share": entry.explained_share}


def _set_mechanism(b, c) -> dict:
    """From the two sides' durability records: the cohorts (jobs a write waits) or the jobs' length."""
    db = b.server.durability if b is not None and b.server else None
    dc = c.server.durability if c is not None and c.server else None
    if not db or not dc or db.jobs_waited_per_write is None or dc.jobs_waited_per_write is None:
        return {"mechanism": "missing"}
    wb, wc, jb, jc = db.jobs_waited_per_write, dc.jobs_waited_per_write, db.job_ms_p50, dc.job_ms_p50
    figures = {"cohorts": (db.cohorts, dc.cohorts), "jobs_waited": (wb, wc), "job_ms": (jb, jc)}
    if db.cohorts != dc.cohorts or abs(wc - wb) >= 0.3:
        return {"mechanism": "cohorts", **figures}
    if jb and jc and abs(jc - jb) >= 0.15 * jb:
        return {"mechanism": "job_length", **figures}
    return {"mechanism": "neither", **figures}


def table_notes(comparison, explanation: list, base_cells: list, cand_cells: list) -> dict[str, SeedNote]:
    """{workload: SeedNote} for each table the comparison has (its first value size's row)."""
    out = {}
    for workload, s in SEED.items():
        # the seed's figures are a closed loop's: an open-loop row (a rate offered) is not that table
        rows = [r for r in comparison.rows if r.workload == workload and r.op == s.op and not r.rate]
        if not rows:
            continue
        row = rows[0]
        if workload == "read-heavy":
            entry = next((e for e in explanation or [] if (e.workload, e.op, e.value_size, e.metric)
                          == (workload, "GET", row.value_size, P50)), None)
            how = _get_mechanism(entry)
        else:
            b = next((x for x in base_cells if x.workload == workload and x.value_size == row.value_size), None)
            c = next((x for x in cand_cells if x.workload == workload and x.value_size == row.value_size), None)
            how = _set_mechanism(b, c)
        bm, cm = row.base.median, row.cand.median
        out[workload] = SeedNote(workload, s, row.value_size, bm.p50_us or 0.0, cm.p50_us or 0.0, bm.tps or 0.0,
                                 cm.tps or 0.0, row.significant[P50], **how)
    return out
