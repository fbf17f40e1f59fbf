"""A report's sections in words: the latency-throughput curve (analysis/curve.py's Curve), the what-if
check (analysis/whatif.py's Check), the intervention slopes (analysis/sensitivity.py's Slope) and the
seed tables' notes (analysis/seed.py's SeedNote). The analysis hands over those records; the text,
markdown and HTML reporters print these lines."""
from __future__ import annotations

from valkeytrace.analysis import model
from valkeytrace.analysis.curve import Curve
from valkeytrace.analysis.report import ReportInput
from valkeytrace.analysis.seed import SeedNote
from valkeytrace.analysis.sensitivity import Slope
from valkeytrace.analysis.whatif import Check
from valkeytrace.reporters.claims import say
from valkeytrace.reporters.facts_words import fmt_time


TITLES = {"no_change": "No significant change", "unknown": "Significance unknown (fewer than 2 repeats a side)",
          "unattributed": "Significant, not attributed (no server-side trace or not modelled)"}


def finding_title(kind: str) -> str:
    """A finding's heading (analysis/verdict.py's Finding.kind): its component's label, capitalized."""
    label = model.LABELS.get(kind, kind)
    return TITLES.get(kind) or f"{label[0].upper()}{label[1:]}"


def caveats_by_cell(explanation: list) -> list[tuple[str, list[str]]]:
    """[(caveat, [cells])]: each caveat once, with the cells it applies to; one said of both sides
    (the same words, two labels) said once for both; the emulation's (every report's banner) left
    out. Read from the entries' caveat records, never from their sentences."""
    out: dict[str, list[str]] = {}
    who: dict[str, list[str]] = {}
    for e in explanation or []:
        for c in e.caveat_records:
            if c.finding == "emulation":
                continue
            label, text = c.label, say(c)
            cell = e.cell
            cells = out.setdefault(text, [])
            if cell not in cells:
                cells.append(cell)
            if label and label not in who.setdefault(text, []):
                who[text].append(label)
    return [(f"{' and '.join(who[t])}: {t}" if who.get(t) else t, cells) for t, cells in out.items()]


def model_sections(inp: ReportInput) -> list[tuple[str, list[str]]]:
    """[(title, sentences)]: the open loop's curves, the baseline's prediction of the candidate against
    its measurement (the pipeline model) and the intervention slopes."""
    out = []
    if inp.curves:
        out.append(("Latency-throughput curve (open loop: latency from each request's due moment)",
                    [describe_curve(c) for c in inp.curves]))
    if inp.whatif:
        out.append(("What-if check: the baseline's prediction against the candidate", describe_check(inp.whatif)))
    for run in inp.runs:
        if run.sensitivity:
            out.append((f"Intervention: fsync delay added ({run.label})", describe_slopes(run.sensitivity)))
    return out


def describe_curve(cv: Curve) -> str:
    """Where a side kept up and saturated, then each rate's point (a saturated fixed pool's bound beside)."""
    pts = "; ".join(f"{p.rate:,.0f}/s: achieved {p.achieved_rate or 0:,.0f}/s, p50 {fmt_time(p.p50_us)}, p99 {fmt_time(p.p99_us)}"
                    + (" SATURATED" + (f" (the pool's {cv.connections} connections over a service p50 of "
                                       f"{fmt_time(p.service_p50_us)}: {p.pool_bound:,.0f}/s)" if p.pool_bound else "")
                       if p.saturated else "") for p in cv.points)
    where = (f"kept up to {cv.saturates_above:,.0f}/s" if cv.saturates_above else "kept up with no rate tried") + (
        f", saturated at {cv.first_saturated:,.0f}/s" if cv.first_saturated else ", with every rate tried")
    pool = f" over {cv.connections} connections, one request in flight each" if cv.connections else ""
    return f"{cv.label} {cv.workload} {cv.value_size} B {cv.op}{pool}: {where}. {pts}"


def describe_check(checked: list[Check]) -> list[str]:
    """One line per cell: each metric predicted from the baseline alone, with its interval, against the
    measurement: inside or outside the interval, the point's error."""
    names = {"tps": "TPS", "p50_us": "p50", "p95_us": "p95", "p99_us": "p99", "held_replies_peak": "held replies peak"}
    groups: dict = {}
    for w in checked:
        groups.setdefault((w.workload, w.value_size, w.op, w.rate), []).append(w)
    out = []
    for (workload, size, op, rate), ws in groups.items():
        parts = []
        for w in ws:
            if w.measured is None:
                continue
            fmt = ((lambda v: f"{v / 1000:.1f}K/s") if w.metric == "tps" else (lambda v: f"{v:,.0f}")
                   if w.metric == "held_replies_peak" else fmt_time)
            rng = f" [{fmt(w.interval[0])}, {fmt(w.interval[1])}]" if w.interval else ""
            where = (f"{w.verdict} the {w.level:.0%} range" if w.verdict else
                     f"a point, within {w.tolerance_pct:.0f}%: {'yes' if w.within_tolerance else 'no'}"
                     if w.within_tolerance is not None else "no range")
            parts.append(f"{names[w.metric]} predicted {fmt(w.predicted)}{rng}, measured {fmt(w.measured)} "
                         f"({where}; {w.error_pct:+.0f}%)")
        if parts:
            at = f" at {rate:,.0f}/s" if rate else ""
            out.append(f"{workload} {size} B {op}{at}: " + "; ".join(parts))
    return out


def _delay(ns: int) -> str:
    return f"+{ns / 1e6:g} ms"


def _runs(e: Slope) -> str:
    """ "; each the median of 3 runs (+0 ms: 1)": what each point is (the runs behind it)."""
    runs = e.runs_per_point
    if not runs or max(runs) < 2:
        return ""
    most = max(set(runs), key=runs.count)
    fewer = [f"{_delay(ns)}: {n}" for ns, n in zip(e.point_delays_ns, runs) if n != most]
    return f"; each the median of {most} runs" + (f" ({', '.join(fewer)})" if fewer else "")


def _points(e: Slope) -> str:
    return " -> ".join(f"{y / 1000:.2f}" for _, y in e.points) + " ms"


def describe_slopes(entries: list[Slope]) -> list[str]:
    """A slope is stated only when reliable (R² >= 0.8, points monotonic); otherwise its points."""
    out = []
    for e in entries:
        what = f"{e.workload} {e.value_size} B {e.op} {e.metric.replace('_us', '')}"
        added = ", ".join(_delay(ns) for ns in e.added_delays_ns) + _runs(e)
        if not e.reliable:
            out.append(f"{what}: not measured reliably against {e.thread_role} fsync (R² {e.r2:.2f}; "
                       f"points {_points(e)} at added delays {added})")
            continue
        out.append(f"{what}: each extra 1 ms of {e.thread_role} fsync (p50) adds {e.slope:.2f} ms (R² {e.r2:.2f}, "
                   f"{len(e.points)} points: added delays {added})")
    return out


def _pct(a: float, b: float) -> str:
    v = 100.0 * (b - a) / a if a else 0.0
    return f"{'+' if v >= 0 else '−'}{abs(v):.1f}%"


def _mechanism(n: SeedNote) -> str:
    if n.mechanism == "none":
        return "no change to explain"
    if n.mechanism == "led":
        lead = model.LABELS.get(n.lead or "", n.lead or "")
        return f"led by {lead}" + (f", durability work {n.share:.0%} of the change" if n.share is not None else "")
    if n.mechanism == "missing":
        return "the durability records are missing (the eBPF backend times each write's wait)"
    (cb, cc), (wb, wc), (jb, jc) = n.cohorts or (None, None), n.jobs_waited or (0.0, 0.0), n.job_ms or (None, None)
    jobs = f"{jb or 0:.2f} -> {jc or 0:.2f} ms"
    if n.mechanism == "cohorts":
        return (f"the cohorts: {cb} -> {cc} ({wb:.1f} -> {wc:.1f} jobs a write waits, of {jobs}): more SETs ride "
                "each fdatasync")
    if n.mechanism == "job_length":
        return f"each job's length ({jobs}), {wb:.1f} -> {wc:.1f} jobs a write"
    return (f"neither: a write waits {wb:.1f} -> {wc:.1f} jobs of {jobs}, in the same cohorts "
            "(a gather window, compare --candidate-offload-gather auto, is the lever that makes one)")


def seed_note(n: SeedNote) -> str:
    """The seed's table beside this host's row of it, and the mechanism the compare shows."""
    s = n.seed
    word = "significance unknown" if n.significant is None else "significant" if n.significant else "not significant"
    here = (f"{s.op} p50 {_pct(n.base_p50_us, n.cand_p50_us)}, TPS {_pct(n.base_tps, n.cand_tps)} at {n.value_size} B "
            f"({word})")
    seed = (f"The seed (valkey#4029, 64 B): {s.op} p50 {_pct(s.base.p50_us, s.cand.p50_us)}, "
            f"TPS {_pct(s.base.tps, s.cand.tps)} with the fsync off the main thread")
    if n.workload == "read-heavy":
        return f"{seed}: a GET no longer waits for the main thread's fsync. This host: {here}, {_mechanism(n)}."
    return (f"{seed}, every SET still acknowledged after its fdatasync: each fdatasync carries more of them (by "
            f"Little's law, one cohort instead of two). This host: {here}; the SET's mechanism: {_mechanism(n)}.")
