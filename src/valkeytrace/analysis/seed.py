"""What the seed's two tables (valkey-io/valkey#4029, 64 B rows; ../shared/seed) imply, and which
mechanism a compare shows here: one sentence per table, from the comparison's own rows and the
durability records (the kernel's timestamps), never typed as results."""
from __future__ import annotations

from dataclasses import dataclass

from valkeytrace.analysis import model
from valkeytrace.analysis.facts import SeedPoint


@dataclass(frozen=True)
class SeedTable:
    op: str
    base: SeedPoint
    cand: SeedPoint


# the seed's published 64 B rows: baseline (upstream, appendfsync always) and #3381's offload
SEED = {"read-heavy": SeedTable("GET", SeedPoint(5450.0, 10263.0), SeedPoint(70670.0, 359.0)),
        "write-only": SeedTable("SET", SeedPoint(4840.0, 10831.0), SeedPoint(9020.0, 5463.0))}


def _pct(a: float, b: float) -> str:
    v = 100.0 * (b - a) / a
    return f"{'+' if v >= 0 else '−'}{abs(v):.1f}%"


def _here(row) -> str:
    b, c = row.base.median, row.cand.median
    word = {True: "significant", False: "not significant"}.get(row.significant[P50], "significance unknown")
    return (f"{row.op} p50 {_pct(b.p50_us or 0, c.p50_us or 0)}, TPS {_pct(b.tps or 0, c.tps or 0)} at {row.value_size} B "
            f"({word})")


P50 = "p50_us"


def _get_mechanism(entry) -> str:
    if not entry or not entry.leading_component or not entry.significant:
        return "no change to explain"
    lead = model.LABELS.get(entry.leading_component, entry.leading_component)
    share = entry.explained_share
    return f"led by {lead}" + (f", durability work {share:.0%} of the change" if share is not None else "")


def _set_mechanism(b, c) -> str:
    """From the two sides' durability records: the cohorts (jobs a write waits) or the jobs' length."""
    db = b.server.durability if b is not None and b.server else None
    dc = c.server.durability if c is not None and c.server else None
    if not db or not dc or db.jobs_waited_per_write is None or dc.jobs_waited_per_write is None:
        return "the durability records are missing (the eBPF backend times each write's wait)"
    wb, wc, jb, jc = db.jobs_waited_per_write, dc.jobs_waited_per_write, db.job_ms_p50, dc.job_ms_p50
    if db.cohorts != dc.cohorts or abs(wc - wb) >= 0.3:
        return (f"the cohorts: {db.cohorts} -> {dc.cohorts} ({wb:.1f} -> {wc:.1f} jobs a write waits, of "
                f"{jb:.2f} -> {jc:.2f} ms): more SETs ride each fdatasync")
    if jb and jc and abs(jc - jb) >= 0.15 * jb:
        return f"each job's length ({jb:.2f} -> {jc:.2f} ms), {wb:.1f} -> {wc:.1f} jobs a write"
    return (f"neither: a write waits {wb:.1f} -> {wc:.1f} jobs of {jb:.2f} -> {jc:.2f} ms, in the same cohorts "
            "(a gather window, compare --candidate-offload-gather auto, is the lever that makes one)")


def table_notes(comparison, explanation: list, base_cells: list, cand_cells: list) -> dict:
    """{workload: sentence} for each table the comparison has (its first value size's row)."""
    out = {}
    for workload, s in SEED.items():
        # the seed's figures are a closed loop's: an open-loop row (a rate offered) is not that table
        rows = [r for r in comparison.rows if r.workload == workload and r.op == s.op and not r.rate]
        if not rows:
            continue
        row = rows[0]
        sb, sc = s.base, s.cand
        seed = (f"The seed (valkey#4029, 64 B): {s.op} p50 {_pct(sb.p50_us, sc.p50_us)}, "
                f"TPS {_pct(sb.tps, sc.tps)} with the fsync off the main thread")
        if workload == "read-heavy":
            entry = next((e for e in explanation or [] if (e.workload, e.op, e.value_size, e.metric)
                          == (workload, "GET", row.value_size, P50)), None)
            out[workload] = (f"{seed}: a GET no longer waits for the main thread's fsync. This host: {_here(row)}, "
                             f"{_get_mechanism(entry)}.")
        else:
            b = next((x for x in base_cells if x.workload == workload and x.value_size == row.value_size), None)
            c = next((x for x in cand_cells if x.workload == workload and x.value_size == row.value_size), None)
            out[workload] = (f"{seed}, every SET still acknowledged after its fdatasync: each fdatasync carries more "
                             f"of them (by Little's law, one cohort instead of two). This host: {_here(row)}; "
                             f"the SET's mechanism: {_set_mechanism(b, c)}.")
    return out
