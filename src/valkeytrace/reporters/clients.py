"""The #4029 tables every reporter shows (the seed's columns and delta convention), the memory tables beside
them, and the short names a narrow table gives the two sides (with the legend that names them in full)."""
from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from valkeytrace import workloads
from valkeytrace.workloads import REPLICA_OP
from valkeytrace.analysis.report import AnalysedRun, ReportInput
from valkeytrace.analysis.tables import MEASURED_OP, METRICS, Figures
from valkeytrace.analysis.whatif import predicted_ops
from valkeytrace.reporters.base import fmt_ktps, fmt_mbs, fmt_pct, fmt_us
from valkeytrace.reporters.memory_words import MemoryTable, memory_table, stall_note
from valkeytrace.reporters.sections import seed_note

COLUMNS = ("Value", "Op", "TPS (K req/s)", "MB/s", "P50 (µs)", "P95 (µs)", "P99 (µs)", "Notes")
DELTA_CONVENTION = ("Delta convention: {cand} vs {base}. TPS and MB/s: positive = higher throughput "
                    "(better). P50/P95/P99: negative = lower latency (better). MB/s = TPS × value size "
                    "(TPS × value bytes / 10^6). Each cell is the median of its repeats.")
SHORT_LABEL = 14  # a label this long or shorter names its side in a narrow table as it is
PREDICTED = "predicted (model, from the baseline)"


@dataclass(frozen=True)
class Sides:
    """The name each side goes by in a table (one per run, in order), and the legend that gives the full
    names (None when every name is its label)."""
    names: tuple
    legend: str | None


def side_names(runs: list[AnalysedRun]) -> Sides:
    """Short and stable: the labels when each is short and they differ; else what tells the sides apart in
    their settings (`always`, `everysec`, `offload`, `offload+0.5ms`: the virtual offload and its gather
    window); else A, B."""
    labels = [r.label for r in runs]
    if all(len(x) <= SHORT_LABEL for x in labels) and len(set(labels)) == len(labels):
        return Sides(tuple(labels), None)
    names = [_setting_name(r) for r in runs]
    if not all(names) or len(set(names)) < len(names) or any(len(n) > SHORT_LABEL for n in names):
        names = [chr(ord("A") + i) for i in range(len(runs))]
    return Sides(tuple(names), "; ".join(f"{n} = {x}" for n, x in zip(names, labels)))


def _setting_name(run: AnalysedRun) -> str:
    off = run.doc.emulation.offload
    if off is not None and off.mode:
        name = "offload" if off.mode == "durable" else off.mode
        return name + (f"+{off.gather_ns / 1e6:g}ms" if off.gather_ns else "")
    return run.server.appendfsync or ""


def _seed_note(inp: ReportInput, workload: str) -> str | None:
    n = (inp.seed_notes or {}).get(workload)
    return seed_note(n) if n else None


def _row(label, size, op, f: Figures, note=""):
    size = size if isinstance(size, str) else f"{size} B"
    return [label, size, op, fmt_ktps(f.tps), fmt_mbs(f.mb_s), fmt_us(f.p50_us), fmt_us(f.p95_us), fmt_us(f.p99_us),
            note]


def open_note(o) -> str:
    """An open-loop op: offered and achieved, and SATURATED when it answered less than offered."""
    m = o.median
    if not m.offered_rate:
        return ""
    sat = "SATURATED: " if o.saturated else ""
    cost, stalls = m.client_us_per_request, stall_note(o)
    return (f"{sat}offered {m.offered_rate / 1000:.1f}K/s, achieved {(m.achieved_rate or 0) / 1000:.1f}K/s, service p50 "
            f"{fmt_us(m.service_p50_us)} µs" + (f", client {cost:.1f} µs CPU/request" if cost else "")
            + (f"; {stalls}" if stalls else ""))


class _Settings(dict):
    def __missing__(self, key):
        return "?"


def workload_note(run, workload) -> str:
    fsync = run.server.appendfsync or "?"
    settings = {k: v for k, v in msgspec.to_builtins(run.settings).items() if v is not None}
    return workloads.BY_NAME[workload].note.format_map(_Settings(settings)) + f"; fsync={fsync}"


@dataclass
class ClientTable:
    """A #4029 table: the seed's columns; rows (cells, kind), kind "" for one recording, else "baseline"
    / "candidate" / "predicted" / "delta"; the seed's sentence for it (compare); and what the server held
    over the same cells (memory_words.MemoryTable, None when nothing was sampled)."""
    title: str
    columns: tuple
    rows: list
    seed: str | None = None
    memory: MemoryTable | None = None
    names: tuple = field(default_factory=tuple)  # the sides' names in the rows


def client_tables(inp: ReportInput, short: bool = False) -> list[ClientTable]:
    """The #4029 tables (the seed's columns and delta convention); short: the sides by side_names() and the
    model's row as `predicted` (a narrow terminal's), else by their labels."""
    names = side_names(inp.runs).names if short else tuple(r.label for r in inp.runs)
    if inp.comparison is None:
        return _single_tables(inp.baseline, names[0])
    out = []
    for w in workloads.TABLED:
        rows = _compare_rows(inp, w.name, names, "predicted" if short else PREDICTED)
        if rows:
            mem = memory_table(w, list(zip(names, inp.runs)))
            out.append(ClientTable(w.title or w.name, COLUMNS, rows, _seed_note(inp, w.name), mem, names))
    return out


def _single_tables(run: AnalysedRun, name: str) -> list[ClientTable]:
    out = []
    for w in workloads.TABLED:
        workload = w.name
        cells = [c for c in run.cells if c.workload == workload and MEASURED_OP[workload] in c.ops]
        if not cells:
            continue
        rows = []
        for i, c in enumerate(cells):
            o = c.ops[MEASURED_OP[workload]]
            note = workload_note(run, workload) if i == 0 else ""
            size = f"{c.value_size} B" + (f" @ {c.rate:,.0f}/s" if c.rate else "")
            extra = open_note(o)
            if note and c.rate:
                note += "; open loop: latency from each request's due moment"
            rows.append((_row(name, size, o.op, o.median, f"{note}{'; ' if note else ''}n={o.n}"
                              + (f"; {extra}" if extra else "")), ""))
            rows += _shard_rows(c, o.op, size)
        out.append(ClientTable(w.title or w.name, COLUMNS, rows, memory=memory_table(w, [(name, run)]), names=(name,)))
    return out


def _shard_rows(c, op: str, size: str) -> list:
    """record --cluster: a row per shard under the system's (its own clients' figures), the slowest named."""
    from valkeytrace.analysis.cluster import slowest

    worst = slowest(c.shards, op)
    return [(_row(f"  shard {s.shard}", size, op, s.ops[op].median,
                  f"port {s.port}, {s.keys:,} keys" + ("; the slowest shard" if s is worst and len(c.shards) > 1 else "")),
             "shard") for s in c.shards if op in s.ops]


def failover_line(f) -> str:
    """record --failover in one line: the timeline and the witness."""
    if not f.promoted:
        return f"failover of shard {f.shard}: killed at {f.killed_at_s} s, no replica promoted ({f.error or 'none took a write'})"
    dirty = ("not built" if f.promoted_dirty is None else f"{f.promoted_dirty:,} keys the new primary holds at a write "
             "sent before the kill that the dead primary's disk, cut at its last completed sync, lacks")
    return (f"failover of shard {f.shard}: its primary killed {f.killed_at_s:.2f} s into the window, its replica (port "
            f"{f.promoted_port}) promoted at {f.promoted_at_s:.2f} s, the first write acknowledged {f.unavailable_ms:,.0f} ms "
            f"after the kill (the shard's clients could not write in between: its client's connections closed at the kill, the rest of its requests unanswered, counted in its row); acknowledged "
            f"writes lost: {f.acked_missing:,} of {f.acked:,} keys; promoted dirty: {dirty}")


def _compare_rows(inp: ReportInput, workload: str, names: tuple, predicted_label: str) -> list:
    base, cmp = inp.baseline, inp.comparison
    assert cmp is not None  # client_tables: a compare's rows only
    predicted = predicted_ops(inp.whatif or [])
    table: list = []
    for i, r in enumerate(x for x in cmp.rows if x.workload == workload and x.op in (MEASURED_OP[workload], REPLICA_OP)):
        note = workload_note(base, workload) if i == 0 else ""
        size = f"{r.value_size} B" + (f" @ {r.rate:,.0f}/s" if r.rate else "")
        if note and r.rate:
            note += "; open loop: latency from each request's due moment"
        bo, co = open_note(r.base), open_note(r.cand)
        table.append((_row(names[0], size, r.op, r.base.median,
                           "; ".join(x for x in (note, bo and f"{names[0]} {size}: {bo}") if x)), "baseline"))
        table.append((_row(names[1], size, r.op, r.cand.median, co and f"{names[1]} {size}: {co}"), "candidate"))
        q = predicted.get((r.workload, r.value_size, r.op, r.rate))
        if q:
            errs = ", ".join(f"{k.replace('_us', '').upper()} {v:+.0f}%" for k, v in q.errors.items())
            f, iv = q.figures, q.intervals

            def ranged(fmt, k):
                lo_hi = iv.get(k)
                return fmt(getattr(f, k)) + (f" [{fmt(lo_hi[0])}, {fmt(lo_hi[1])}]" if lo_hi else "")
            table.append(([predicted_label, size, r.op, ranged(fmt_ktps, "tps"),
                           fmt_mbs(f.tps * r.value_size / 1e6 if f.tps else None), ranged(fmt_us, "p50_us"),
                           ranged(fmt_us, "p95_us"), ranged(fmt_us, "p99_us"),
                           f"predicted by the model from {names[0]}, vs measured: {errs}; "
                           "[90% range for one recording]"], "predicted"))
        if min(r.base.n, r.cand.n) < 2:
            dnote = f"significance unknown (n={r.base.n}/{r.cand.n})"
        else:
            noisy = [m.replace("_us", "").upper().replace("MB_S", "MB/s") for m, v in r.noise.items() if v]
            dnote = f"not significant: {', '.join(noisy)} (n={r.base.n}/{r.cand.n})" if noisy else ""
        table.append((["delta", f"{r.value_size} B", r.op, *[fmt_pct(r.deltas[m]) for m in METRICS], dnote], "delta"))
    return table
