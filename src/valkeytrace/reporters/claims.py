"""The explanation's words: one table of templates (TEMPLATES: a clause's type -> the sentence made
from its figures) for every clause a claim says (analysis/clauses.py), every fact a side stands on
and every caveat (analysis/facts.py). The analysis decides what is said and hands over typed
records; nothing here computes a figure or reads one back from a sentence. say(record) words any of
them (a coded warning too, from reporters/sentences.py's table); claim(entry) joins an entry's
clauses in their order; entry_json(entry) is its JSON with these words."""
from __future__ import annotations

from typing import Any, Callable

from valkeytrace.analysis import clauses as cl
from valkeytrace.analysis import facts
from valkeytrace.analysis.model import LABELS, RequestIterations
from valkeytrace.analysis.note import Note, Rule
from valkeytrace.analysis.tables import MIN_EFFECT
from valkeytrace.analysis.verdict import LagNote
from valkeytrace.reporters.facts_words import CAVEATS, SIDES, _delta, _pct, fmt_time, gap_text
from valkeytrace.reporters.sentences import WARNING_TEMPLATES, warning_text


def _change(c: cl.Change) -> str:
    return (f"{c.op} {c.metric.replace('_us', '')} {fmt_time(c.base)} -> {fmt_time(c.cand)} "
            f"({_pct(100 * (c.cand - c.base) / c.base)}):")


def _significance(s: cl.Significance) -> str:
    nb, nc = s.n
    if s.kind == "significance.unknown":
        return (f"significance unknown (n={nb} vs n={nc}): record with --repeat 3; "
                "the accounting below is not an explanation.")
    if s.kind == "significance.none":
        return (f"no significant change (n={nb} vs n={nc}: the medians differ by less than {MIN_EFFECT:.0%}, or "
                "the repeats' ranges overlap and the clients' interval samples are not shifted): nothing to explain.")
    return (f"significant (n={nb} vs n={nc}: the medians differ by {MIN_EFFECT:.0%} or more, and the repeats' "
            "ranges are disjoint or the clients' interval samples are shifted, rank test p < 0.01).")


def _launches(j: cl.LaunchJudgement) -> str:
    lo, hi = j.interval_pct
    return (f"{'significant' if j.significant else 'no significant change'} ({j.launches[0]} vs {j.launches[1]} "
            f"server launches: the change of their means {_pct(j.change_pct)}, 95% interval "
            f"[{lo:+.1f}%, {hi:+.1f}%]{'' if j.significant else ': nothing to explain'}).")


def _paths(p: cl.Paths) -> str:
    sides = [f"{label} {' and '.join(f'{u:.2f}' for u in paths)}" for label, paths in zip(p.labels, p.paths) if paths]
    return (f"no significant change (n={p.n[0]} vs n={p.n[1]}, one server launch a side): the repeats lie on "
            f"different paths of the server, their p50s in fsync cycles {'; '.join(sides)} (one cycle per request "
            "in some launches, two in others): a mode of the server cannot be told from a change in one launch; "
            "valkeytrace compare --launches 3 would tell (nothing to explain).")


def _throughput(t: cl.ThroughputMoved) -> str:
    tb, tc = t.tps
    out = f"But {t.op} TPS moved significantly, {tb / 1000:.1f}K/s -> {tc / 1000:.1f}K/s ({_pct(100 * (tc - tb) / tb)})"
    mb, mc = t.mean_us
    if mb and mc:
        out += f", and the mean latency {fmt_time(mb)} -> {fmt_time(mc)} ({_pct(100 * (mc - mb) / mb)}): not the median request"
    if t.in_flight:
        out += (f"; the clients kept {t.in_flight[0]:.0f} -> {t.in_flight[1]:.0f} of {t.clients} requests "
                "in flight (TPS x mean latency): the rest of the time is the clients' own")
    return out + "."


def _host_side(s: cl.HostSide) -> str:
    parts = ", ".join(f"{name} {cores:.2f}" for name, cores in s.parts)
    return f"{s.label} {s.host_cores or 0:.2f} of {s.cpus or '?'} cores busy ({parts})"


def _host_cpu(h: cl.HostCpu) -> str:
    grew = [f"{name} +{d:.2f} cores" for name, d in sorted(h.grew.items(), key=lambda x: (x[1], x[0]), reverse=True)]
    return "Host CPU: " + "; ".join(_host_side(s) for s in h.sides) + (f": {', '.join(grew)}." if grew else ".")


def _cpu_wait(w: cl.CpuWait) -> str:
    out = "Waiting for a CPU: " + ", ".join(f"{who} {x:.0f}% -> {y:.0f}%" for who, (x, y) in w.waits.items())
    if w.landed_on:
        out += f": it landed mostly on {w.landed_on} (+{w.points:.0f} points)"
    return out + "."


def _repeats(s: cl.SideRepeats) -> str:
    """'1.03 ms (main thread 27%, GET clients 10%), 463 µs (16%, 45%)'."""
    first, rest = s.repeats[0], s.repeats[1:]
    out = [f"{fmt_time(first.p50_us)} (main thread {first.main_pct:.0f}%, {s.clients} {100 * first.clients_wait:.0f}%)"]
    out += [f"{fmt_time(r.p50_us)} ({r.main_pct:.0f}%, {100 * r.clients_wait:.0f}%)" for r in rest]
    return ", ".join(out)


def _spread(s: cl.Spread) -> str:
    wide = [f"{label} {fmt_time(lo)}-{fmt_time(hi)}" for label, (lo, hi) in s.spread.items()]
    detail = [f"{r.label}, per repeat: {_repeats(r)}" for r in s.waiting]
    return (f"The repeats disagree ({s.name}: {'; '.join(wide)}): the median of {s.n[0]} vs {s.n[1]} can land "
            "in either mode; more repeats (--repeat 5 or more) would tell."
            + (f" Waiting for a CPU, {'; '.join(detail)}." if detail else ""))


def _cause(c: cl.Cause) -> str:
    named = " and ".join(f"{LABELS[n]} ({_delta(d)})" for n, d in zip(c.components, c.deltas))
    if c.kind == "cause.leading":
        return f"Leading: {named}."
    share = c.share or 0.0
    if c.kind == "cause.not_fsync":
        return f"Not fsync ({share * 100:.0f}% of the change): {named}."
    who = ("the wait for durable batches (write + fdatasync off the main thread) and the main thread's AOF work"
           if c.offload else "the main thread's AOF durability work")
    verdict = f"fsync: {who} account{'' if c.offload else 's'} for {share * 100:.0f}% of the change"
    if c.fit == "over":
        verdict += " (the model over-predicts: the server-side terms move more than the clients saw)"
    elif c.fit == "under":
        verdict += " (the rest: " + ", ".join(f"{LABELS[n]} {_delta(d)}" for n, d in c.rest) + ")"
    return verdict[0].upper() + verdict[1:] + "."


def _check(c: cl.IoThreads | cl.Intervention) -> str:
    if isinstance(c, cl.IoThreads):
        return (f"with {c.io_threads} I/O threads the query is read between two of the main thread's iterations "
                f"(the model counts {c.k:g} loop units per request) and the main thread polls in between: the "
                "model is rougher there")
    verdict = {"agrees": "agrees", "under": "so the model under-states the fsync's part"}.get(
        c.agrees, "so the model over-states the fsync's part")
    return (f"the intervention measured {c.slope:.2f} ms of {c.op} p50 per extra ms of main-thread "
            f"fsync (R² {c.r2:.2f}) against the model's {c.k:g} fsync cycle{'' if c.k == 1 else 's'} per "
            f"request: {verdict}")


def _model_check(m: cl.ModelCheck) -> str:
    text = "; ".join(say(c) for c in m.checks) + "."
    return f"{m.label}: {text}" if m.label else text[0].upper() + text[1:]


def _accounting(a: cl.Accounting) -> str:
    parts = [f"{LABELS[n]} {_delta(d)}" for n, d in a.deltas if abs(d) >= 0.5]
    return "Contributions to the change: " + (", ".join(parts) if parts else "none") + "."


def _iterations(label: str, it: RequestIterations) -> str:
    """How the model chose k on one side: 'fsync-always: the mean GET spans 1.09 fsync cycles of
    5.11 ms: 91% of requests made the main thread's next poll, so the median one spends 1'; or
    the p50's own position when it contradicts the mean."""
    if it.mean_in_units is None and it.p50_in_units is None:
        return f"{label}: {it.k:g} loop units per request (no loop time to measure it against)"
    units = f"{it.unit}s of {fmt_time(it.unit_us)}"
    if it.source == "kernel":
        return (f"{label}: each write waited {it.k:.2f} {units} from its arrival to its reply (the kernel's "
                "timestamps of every request)")
    if it.quick:
        return (f"{label}: the median latency spans {it.p50_in_units or 0:.2f} {units}: the median request waited no "
                "fsync cycle (answered by iterations that executed no write), so it is taken to spend "
                f"{it.most:g} plain iterations in the server and no fsync")
    if it.source == "p50":
        mean = (f"; the mean latency, {it.mean_in_units or 0:.2f}, would have given {it.mean_k:g}"
                if it.mean_k is not None else "")
        return (f"{label}: the median latency spans {it.p50_in_units or 0:.2f} {units}, between the paths of "
                f"{it.most - 1:g} and {it.most:g}: the median request came in during one and waited its rest and "
                f"the next, so {it.k:.2f} are taken as time in the server{mean}")
    c = it.mean_in_units or 0.0
    if c >= it.most:
        return (f"{label}: the mean latency spans {c:.1f} {units}, so every request is taken to "
                f"spend {it.most:g} in the server and the rest outside it")
    return (f"{label}: the mean latency spans {c:.2f} {units}: "
            f"{100 * (it.shorter_path_share or 0):.0f}% of requests made the main thread's next poll, so the median "
            f"one spends {it.k:g}")


def _side_units(s: cl.SideUnits) -> str:
    if len(s.used) == 1:
        return _iterations(s.label, s.used[0].iterations)
    a, b = s.used[0], s.used[1]
    return (f"{s.label}, the median of {a.name} and {b.name} (p50 {fmt_time(a.p50_us)} and {fmt_time(b.p50_us)}), each "
            "modelled on its own: " + "; ".join(_iterations(u.name, u.iterations) for u in s.used))


def _loop_units(u: cl.LoopUnits) -> str:
    return "Loop units per request: " + "; ".join(_side_units(s) for s in u.sides) + "."


UNMODELLED = {"no_server_trace": "no server-side trace (--backend none)", "no_window": "no measured window",
              "no_loop_count": ("no count of the main thread's event-loop iterations (the server's INFO has no "
                                "eventloop_cycles, and only a sample of iterations was seen)"),
              "no_budget": "no main-thread time budget"}


def _tail(t: cl.TailNotModelled) -> str:
    name = t.metric.replace("_us", "")
    return (f"The {name} is not modelled: the model is of a typical request (one to three loop iterations); the tail "
            f"follows the fsync and iteration tails (main fdatasync p99 {fmt_time(t.fsync_p99_us[0])} -> "
            f"{fmt_time(t.fsync_p99_us[1])}); record --fsync-sensitivity measures its slope.")


def _parts(p: cl.Parts) -> str:
    return ("Of it: " + ", ".join(f"{LABELS[n]} {fmt_time(v) if v >= 0 else _delta(v)}" for n, v in p.parts if abs(v) >= 0.5)
            + "." + (" (The server-side terms exceed the latency: the model over-predicts here.)" if p.over else ""))


def _group_commit(g: cl.GroupCommit) -> str:
    (tb, tc), (sb, sc) = g.tps, g.sets_per_fsync
    few = "too few fsyncs to count"
    return (f"SET throughput {tb / 1000:.2f}K/s -> {tc / 1000:.2f}K/s; SETs per fsync (group commit) "
            f"{few if sb is None else f'{sb:.1f}'} -> {few if sc is None else f'{sc:.1f}'}: "
            "each fsync covers more SETs when the main thread keeps accepting writes during it.")


def _rule(r: Rule) -> str:
    nb, nc = (r.n + [None, None])[:2]
    return {
        "rule.launches": lambda: (f"launches: the 95% interval of the change (Welch's t on the launches' logarithms) "
                                  f"excludes 0 or not ({(r.launches or [])[0]} vs {(r.launches or [])[-1]} launches, "
                                  "each the median of its repeats)"),
        "rule.unknown": lambda: f"unknown: n={nb} vs n={nc} (2 repeats a side or more are needed)",
        "rule.paths": lambda: f"repeats on different paths of the server (n={nb} vs n={nc}, one launch a side): not a basis",
        "rule.repeats": lambda: f"repeats: {r.min_effect or 0:.0%} floor, disjoint ranges or rank test (n={nb} vs n={nc})",
        "rule.runs_few": lambda: "fewer than 2 runs a side",
        "rule.under": lambda: f"under {r.min_effect or 0:.0%}",
        "rule.ranges_apart": lambda: "the runs' ranges apart",
        "rule.ranges_overlap": lambda: "the runs' ranges overlap",
        "rule.medians_against": lambda: "the pooled samples' medians move the other way",
        "rule.mann_whitney": lambda: f"Mann-Whitney p={r.p or 0:.2g} over the pooled samples",
    }[r.kind]()


def _lag(n: LagNote) -> str:
    (lb, lc), (ab, ac) = n.lag_us, n.after_durable_us
    parts = [f"lag {lb / 1e3:.2f} -> {lc / 1e3:.2f} ms, of which after the primary's sync {ab / 1e3:.2f} -> {ac / 1e3:.2f} ms"]
    if n.jobs:
        jb, jc = n.jobs
        parts.append(f"a write waited {jb.waited:.2f} jobs of {jb.job_ms:.1f} ms ({jb.thread}) -> "
                     f"{jc.waited:.2f} of {jc.job_ms:.1f} ms ({jc.thread}) before the stream carried it")
    parts += [f"{e.side}: {e.propagated} of {e.checked} stream writes reached the replica before they were durable"
              for e in n.early]
    return "; ".join(parts)


CLAUSES: dict[type, Callable[[Any], str]] = {
    Rule: _rule, LagNote: _lag,
    cl.Change: _change, cl.Significance: _significance, cl.LaunchJudgement: _launches, cl.Paths: _paths,
    cl.ThroughputMoved: _throughput, cl.HostCpu: _host_cpu, cl.CpuWait: _cpu_wait, cl.Spread: _spread,
    cl.Cause: _cause, cl.ServerShare: lambda s: f"The server's threads account for {s.share * 100:.0f}% of the change.",
    cl.ModelCheck: _model_check, cl.IoThreads: _check, cl.Intervention: _check, cl.Accounting: _accounting, cl.LoopUnits: _loop_units,
    cl.TailNotModelled: _tail, cl.NotModelled: lambda n: f"Not modelled: {UNMODELLED[n.reason]}.",
    cl.RunHead: lambda h: f"{h.op} p50 {fmt_time(h.p50_us)}.", cl.Parts: _parts, cl.GroupCommit: _group_commit,
    cl.NoServerTrace: lambda _: ("no server-side trace in one of the recordings (--backend none): the client change "
                                 "cannot be attributed"),
}

# the one table of words: a claim's clauses, a side's facts and caveats, the warnings (by their figures' type)
TEMPLATES: dict[type, Callable[[Any], str]] = {**CLAUSES, **SIDES, **CAVEATS, **WARNING_TEMPLATES}


def say(clause) -> str:
    """One clause's sentence, from its type's template and its figures (a warning, a coded Note: its
    figures decoded as its code's declared type first, reporters/sentences.warning_text)."""
    if isinstance(clause, Note):
        return warning_text(clause)
    return TEMPLATES[type(clause)](clause)


def _in_claim(clause) -> str:
    """A clause as a claim says it: a caveat (the durability that differs) as a sentence of its own."""
    text = say(clause)
    return text[0].upper() + text[1:] + "." if isinstance(clause, facts.Caveat) else text


def claim(entry) -> str:
    """An entry's claim: its clauses' sentences in order."""
    return " ".join(_in_claim(c) for c in entry.clauses)


def caveat_words(c: facts.Caveat) -> str:
    """A caveat as a report lists it: 'label: its sentence'."""
    return c.said(say(c))


def entry_json(entry) -> dict:
    """An entry's JSON (analysis/entry.Entry.to_json) with these words."""
    return entry.to_json(claim(entry), [say(s) for s in entry.sides], [say(c) for c in entry.caveat_records])


def gap_json(gap: facts.ServerViewGap) -> dict:
    return {**gap.to_json(), "claim": gap_text(gap)}
