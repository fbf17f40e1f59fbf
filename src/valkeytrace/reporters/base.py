"""Formatting shared by the reporters. What they render is an analysis.report.ReportInput."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from valkeytrace.analysis import verdict as vd
from valkeytrace.analysis.report import AnalysedRun, ReportInput
from valkeytrace.analysis.summary import BUDGET, TIMED_CALLS, MainThread, ServerSummary
from valkeytrace.analysis.tables import MIN_EFFECT
from valkeytrace.system import format_cpu_list
from valkeytrace.reporters.sentences import share_tag
from valkeytrace.reporters.claims import caveat_words, claim, say
from valkeytrace.reporters.facts_words import fmt_time
from valkeytrace.reporters.cost_words import cost_line
from valkeytrace.reporters.trade_words import trade_line

MINUS = "\u2212"  # the seed table writes negative deltas with a real minus sign


def fmt_pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    sign = "+" if value >= 0 else MINUS
    return f"{sign}{abs(value):.2f}%"


def fmt_value(metric: str, v: float | None) -> str:
    """One figure with its unit: '4.91 ms', '215 µs', '38.6K/s'."""
    if v is None:
        return "n/a"
    if metric in ("tps", "rps"):
        return f"{v / 1000:.1f}K/s"
    return fmt_time(v)


def fmt_us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def fmt_ktps(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000:.2f}"


def fmt_mbs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def server_note(run: AnalysedRun) -> str:
    s = run.server
    parts = [f"fsync={s.appendfsync or '?'}"]
    if s.io_threads:
        parts.append(f"io-threads={s.io_threads}")
    if s.bio_aof_offload is not None:
        parts.append(f"bio-aof-offload={'yes' if s.bio_aof_offload else 'no'}")
    return ", ".join(parts)


def client_note(run: AnalysedRun) -> str:
    """'redis-benchmark 7.0.15 on CPU 1 (the server: any of 0-1)', or '... on any CPU'."""
    c = run.client
    out = f"{c.name or '?'} {c.version or ''}".strip()
    place = c.placement
    if place.requested is None and place.client_cpus is None and place.server_cpus is None:
        return out
    if not place.client_cpus:
        return out + " on any CPU (--client-cpus " + str(place.requested) + ")"
    cpus = "CPU" + ("s " if len(place.client_cpus) > 1 else " ") + format_cpu_list(place.client_cpus)
    server, where = place.server_cpus, "on" if place.server_moved else "any of"
    return out + f" on {cpus}" + (f" (the server: {where} {format_cpu_list(server)})" if server else "")


@dataclass
class ExplanationItem:
    title: str
    tag: str
    claim: str
    caveats: list


def explanation_entries(inp: ReportInput) -> tuple[list[ExplanationItem], list[tuple[str, int]]]:
    """(the entries as a report lists them, [(caveat, entries it applies to)]): a caveat that
    applies to more than one entry is said once, after them, not under each; the emulation
    sentence, which every report prints at the top, is not repeated as a caveat."""
    compared = inp.comparison is not None
    entries = (inp.explanation if compared else [e for r in inp.runs for e in (r.explanation or [])]) or []
    caveats = [list(dict.fromkeys(caveat_words(c) for c in e.caveat_records if c.finding != "emulation")) for e in entries]
    uses = Counter(c for cs in caveats for c in cs)
    out = [ExplanationItem(f"{e.workload} {e.value_size} B {e.op} {e.metric.replace('_us', '')}", share_tag(e, compared),
                           claim(e), [c for c in cs if uses[c] == 1]) for e, cs in zip(entries, caveats)]
    return out, [(c, n) for c, n in uses.items() if n > 1]


SERVER_COLUMNS = ("Call", "Count", "p50 µs", "p99 µs", "max µs", "Total ms", "% of wall")


def _num(v, fmt="{:,.0f}") -> str:
    return "–" if v is None else fmt.format(v)


@dataclass
class ServerTable:
    """A cell's server threads: columns (after "Thread role"), rows (cells, last_of_its_role), a caption,
    and notes [(text, is_warning)]."""
    title: str
    columns: tuple
    rows: list
    caption: str | None
    notes: list


def server_tables(inp: ReportInput) -> list[ServerTable]:
    """Per recording and cell with server data. The notes state every figure that is not what it looks
    like: on-CPU time without scheduler data, off-CPU intervals rescaled to the window, a loop sample that
    is not a total, lost events."""
    out = []
    for run in inp.runs:
        for cell in run.cells:
            if cell.server:
                out.append(server_table(run.label, cell, run.tracer_cost.get(cell.key)))
    return out


def server_table(label: str, cell, cost=None) -> ServerTable:
    srv = cell.server
    m = srv.main_thread
    wall_ms = m.wall_ms or 0
    source = f", calls timed at {srv.call_source}" if srv.call_source else ""
    rows = []
    for th in srv.threads:
        calls = [(call, th.call(call)) for call in TIMED_CALLS if th.call(call).count]
        per = th.threads_per_window or th.threads
        role = f"{th.role} ×{per:g}" if per > 1 else th.role
        role_wall = th.thread_wall_ms or wall_ms * max(1, th.threads)  # % of the role's thread time
        for i, (call, c) in enumerate(calls):
            rows.append(([role if i == 0 else "", call, f"{c.count:,}", _num(c.p50_us), _num(c.p99_us),
                          _num(c.max_us), _num(c.total_ms, "{:,.1f}"),
                          _num(100 * c.total_ms / role_wall if wall_ms else None, "{:.1f}%")], False))
        rows.append(([role if not calls else "", "off-CPU", "", "", "", "", _num(th.off_cpu_ms, "{:,.1f}"),
                      _num(100 * th.off_cpu_ms / role_wall if wall_ms else None, "{:.1f}%")], True))
    notes = _server_notes(cell, srv, m, wall_ms, cost)
    return ServerTable(f"{label} · {cell.workload} {cell.value_size} B · server threads ({srv.backend}{source}, "
                       f"{srv.windows} window(s), {wall_ms / 1000:.1f} s)", SERVER_COLUMNS, rows,
                       "socket writes not timed (record --socket-writes)" if "socket_write" in (srv.untimed or []) else None,
                       notes)


def _server_notes(cell, srv: ServerSummary, m: MainThread, wall_ms: float, cost) -> list[tuple[str, bool]]:
    """The notes under a server table: (text, whether it is a warning)."""
    notes = [("main-thread budget: " + ", ".join(f"{cat.label} {getattr(m, cat.name):.1f}%" for cat in BUDGET
                                                  if getattr(m, cat.name) is not None), False)]
    main = srv.role("main")
    if main is not None:
        notes += _inside_notes(main, m, wall_ms)
    if m.on_cpu_measured is False:
        notes.append(("no scheduler data: \"on CPU\" is the time outside the timed calls, not measured on-CPU time",
                      True))
    if m.off_cpu_over_wall_pct:
        notes.append((f"off-CPU intervals added up to {m.off_cpu_over_wall_pct:.0f}% of the window (intervals "
                      "straddling its edges): the budget is scaled to 100%", True))
    notes.append(_loop_note(srv, m))
    notes += [(f"{ {'aof_write': 'AOF writes'}.get(call, call)} timed: {100 * share:.0f}% of them (an observing window samples them: "
               "their distribution is the sample's, their count, total and bytes estimated from it"
               + (f"; the count \u00b1{100 * srv.sampled_rse[call]:.0f}% at one standard error, from the spread of its samples)"
                  if call in srv.sampled_rse else "; its uncertainty unknown: one sample)"), False)
              for call, share in sorted(srv.sampled.items())]
    host = cell.host_cpu
    if host is not None and host.server_steal_ms is not None:
        notes.append((f"the hypervisor's steal on the server's CPU: {host.server_steal_ms:,.0f} ms per window of "
                      f"{host.wall_s or 0:.1f} s (median of the repeats): in on-CPU time by the "
                      "context switches, not in the kernel's schedstat", False))
    cc = srv.cross_check
    if cc:
        f = cc.fdatasync
        notes.append((f"main-thread fdatasync, both backends: ebpf {f.ebpf_count:,} (p50 {_num(f.ebpf_p50_us)} µs)"
                      f" · shim {f.shim_count:,} (p50 {_num(f.shim_p50_us)} µs); counts differ by "
                      f"{f.count_diff_pct:.1f}%", False))
    lost = srv.lost_events
    notes.append((f"main-thread blocked intervals recorded: {srv.blocked_events:,}; lost events: {lost}"
                  + (" (events were lost: the timeline is incomplete)" if lost else ""), bool(lost)))
    if not srv.sched_traced and srv.backend == "ebpf":
        notes.append(("attached: no program on every context switch (what it would cost: the tracer's own cost below, "
                      "docs/performance.md); on-CPU time and the wait for a CPU are the kernel's schedstat, blocked time "
                      "goes to the timed fsync and AOF-write calls, the rest is 'other blocked' (idle in epoll_wait "
                      "included); no blocked timeline (VALKEYTRACE_PROBES=calls,fs,sched,requests traces the switches)",
                      True))
    said = cost_line(cost)
    if said:
        notes.append((said, False))
    return notes


def _inside_notes(main, m: MainThread, wall_ms: float) -> list[tuple[str, bool]]:
    """Where the main thread spent more of the wall inside a call than the budget counts as blocked in it."""
    notes = []
    for cat in BUDGET:
        for call in cat.calls if cat.calls and cat.calls[0] in TIMED_CALLS else ():
            c, blocked = main.call(call), getattr(m, cat.name)
            share = 100 * c.total_ms / wall_ms if wall_ms and c.total_ms else None
            if share is not None and blocked is not None and share - blocked >= 5:
                notes.append((f"the main thread spent {share:.1f}% of wall inside {call}, blocked {blocked:.1f}%: the "
                              f"other {share - blocked:.1f}% of the call it was on a CPU or waiting for one (the budget "
                              "counts a call's switched-out time only as blocked)", False))
    return notes


def _loop_note(srv: ServerSummary, m: MainThread) -> tuple[str, bool]:
    flushes = f"; {m.aof_flushes:,} AOF flushes" if m.aof_flushes else ""
    if m.loop_iterations and not m.loop_iterations_counted:
        # a sample (the beforeSleep uprobe attached part of the time) and no server count to
        # scale it by (INFO without eventloop_cycles: valkey < 7.2, Redis): not a total
        return (f"event loop ({srv.loop_source}): a sample of {m.loop_iterations:,} iterations "
                f"(not a total: this server's INFO has no eventloop_cycles), p50 "
                f"{_num(m.loop_iteration_p50_us)} µs, p99 {_num(m.loop_iteration_p99_us)} µs" + flushes, True)
    if m.loop_iterations:
        sampled = m.loop_iterations_sampled
        if not sampled:
            dist = "no distribution (record --loop-sample)"
        else:
            dist = (f"p50 {_num(m.loop_iteration_p50_us)} µs, p99 {_num(m.loop_iteration_p99_us)} µs"
                    + (f" (of {sampled:,} sampled)" if sampled < m.loop_iterations else ""))
        mean = f"mean {m.loop_iteration_mean_us:,.1f} µs, " if m.loop_iteration_mean_us else ""
        return (f"event loop ({srv.loop_source}): {m.loop_iterations:,} iterations, "
                f"{m.loop_iterations_per_s:,.0f}/s, {mean}{dist}" + flushes, False)
    if srv.server_exits:
        return ("event loop: not measured (the server ended before the window's end, where its INFO is read)", True)
    return ("event loop: not measured (this server's INFO has no eventloop_cycles, as in valkey < 7.2 "
            "and Redis; record --loop-sample samples iteration durations)", True)


SHORT = {"p50_us": "p50", "p99_us": "p99", "mean_us": "mean", "tps": "TPS"}
SIG = {True: "significant", False: "not significant", None: "significance unknown"}


def verdict_lines(inp: ReportInput) -> list[tuple[tuple[str, str], str]]:
    """[((cell, changes), why)]: per measured op and size, its p50/p99/mean/TPS changes and their
    significance, then what led the p50 change, the intervention's slope and the what-if's verdict
    ('' when there is none of these). The verdict every report opens with."""
    cells: dict[tuple, dict] = {}
    for v in inp.verdict or []:
        cells.setdefault((v.workload, v.op, v.value_size, v.rate), {})[v.metric] = v
    out = []
    for (workload, op, size, rate), by in cells.items():
        if op == vd.REPLICATION_OP:
            out.append(_replication_line(workload, size, by))
            out += [trade_line(t) for t in inp.trades or [] if (t.workload, t.value_size) == (workload, size)]
            continue
        shown = [by[m] for m in vd.VERDICT_METRICS if m in by and by[m].change_pct is not None]
        same = len({v.significant for v in shown}) == 1
        parts = []
        for v in shown:
            figs = f" ({fmt_value(v.metric, v.base)} -> {fmt_value(v.metric, v.cand)})" if v.metric == "p50_us" else ""
            ci = f" [{v.interval_pct[0]:+.1f}, {v.interval_pct[1]:+.1f}]" if v.interval_pct else ""
            parts.append(f"{SHORT[v.metric]} {fmt_pct(v.change_pct)}{ci}{figs}" + ("" if same else f" {SIG[v.significant]}"))
        if shown and same:
            parts[-1] += ": " + ("all " if len(shown) > 1 and shown[0].significant is not None else "") \
                + SIG[shown[0].significant]
        why = []
        p50 = by.get(P50)
        if p50 is not None and p50.significant and p50.leading_label:
            share = (f"; durability work {p50.explained_share:.0%} of the p50 change"
                     if p50.explained_share is not None else "")
            why.append(f"led by {p50.leading_label}{share}")
        elif p50 is not None and p50.bimodal:
            where = "launches" if p50.launches else "repeats"
            why.append(f"p50 {where} on different paths of the server (one fsync cycle or two): the mean (Little's "
                       "law) and TPS are the measure here")
        if p50 is not None and p50.launches_needed:
            why.append(f"about {p50.launches_needed} launches a side would resolve a {vd.DETECT_PCT:.0f}% p50 change")
        if p50 is not None and p50.slope is not None:
            s = p50.slope
            why.append(f"intervention: {s.value:.2f} ms of p50 per ms of {s.thread_role} fsync (R² {s.r2:.2f})"
                       if s.reliable else f"intervention slope not measured reliably (R² {s.r2:.2f})")
        said = _whatif_words([(SHORT[m], by[m].whatif) for m in ("p50_us", "p99_us", "tps") if m in by and by[m].whatif])
        if said:
            why.append(said)
        sat = next(iter(by.values())).saturated if rate else None
        if sat and any(sat):
            why.insert(0, "saturated at this rate: " + " and ".join(
                side for side, x in zip(("the baseline", "the candidate"), sat) if x)
                + " answered less than it was offered (the latency grows with the run, not a steady figure)")
        cell = f"{workload} {op} {size} B" + (f" at {rate:,.0f}/s" if rate else "")
        out.append(((cell, "; ".join(parts)), "; ".join(why)))
    return out


def _whatif_words(checks: list) -> str:
    """'what-if inside its 90% range: p50 +9%, p99 -13%, TPS -2%' (each metric's prediction error), the metrics
    grouped by where they fell: 'what-if outside its 90% range: p50 +57%; inside: p99 -2%, TPS -11%'."""
    groups: dict[str, list[str]] = {}
    for name, w in checks:
        groups.setdefault(w.verdict or "without", []).append(f"{name} {w.error_pct:+.0f}%")
    said = [f"{v}{' its 90% range' if i == 0 else ''}: {', '.join(items)}" for i, (v, items) in enumerate(groups.items())]
    return "what-if " + "; ".join(said) if said else ""


@dataclass
class ReplicationTable:
    title: str
    columns: list
    rows: list
    notes: list
    caption: str | None = None


def replication_tables(inp: ReportInput) -> list[ReplicationTable]:
    """Per recording and cell with replicas: WAITAOF p50/p99, its parts (the probes around the median,
    decomposed from the kernel), the lag, the cap's witness."""
    from valkeytrace.analysis.replication import COMPONENT_LABELS

    out = []
    for run in inp.runs:
        for cell in run.cells:
            r = cell.replication
            if r is None:
                continue
            ms = lambda us: _num(None if us is None else us / 1e3, "{:,.2f} ms")  # noqa: E731
            rows = [(["WAITAOF p50", ms(r.waitaof_p50_us), ""], False), (["WAITAOF p99", ms(r.waitaof_p99_us), ""], True)]
            total = sum(r.components_us.values()) or None
            parts = [["  " + COMPONENT_LABELS.get(k, k), ms(v), _num(100 * v / total if total else None, "{:.0f}%")]
                     for k, v in r.components_us.items()]
            rows += [(cells, i == len(parts) - 1) for i, cells in enumerate(parts)]  # the last part ends its group
            rows += [(["lag p50 (read by the primary -> arrival on the replica)", ms(r.lag_p50_us), ""], False),
                     (["lag p99", ms(r.lag_p99_us), ""], False),
                     (["lag p50 after the primary's sync", ms(r.lag_after_durable_p50_us), ""], True)]
            early = ("not witnessed (no sized socket events)" if r.early_propagated is None else
                     f"{r.early_propagated:,} of {r.early_checked:,} stream writes")
            rows.append((["reached a replica before durable on the primary", early, ""], True))
            src = ("its probes (SET, then WAITAOF 1 N, on a connection of their own)" if r.source == "probe" else
                   "the SET + WAITAOF pairs the kernel saw (no probe ran)")
            notes = [(f"WAITAOF from {src}: {r.probes:,}; its parts: the probes between its 40th and 60th percentiles, "
                      f"each decomposed from both nodes' kernel events joined by the stream's offsets ({r.decomposed:,} "
                      f"decomposed, {r.undecomposed:,} out of order or incomplete), their mean per part", False),
                     (f"lag over {r.lag_writes:,} writes", False)]
            if r.unjoined_windows:
                notes.append((f"{r.unjoined_windows} replica window(s) could not be joined with the primary's by the "
                              "stream's offsets (the replica never caught up in the window, or events were lost): no "
                              "lag or parts from them", True))
            if r.lost_events:
                notes.append((f"{r.lost_events:,} kernel events lost in the nodes' windows: a lost socket write shifts "
                              "the offsets after it, so the join holds only where reads still agree", True))
            for e in r.errors:
                notes.append((f"the probe stopped: {e}", True))
            out.append(ReplicationTable(f"{run.label}: {cell.workload} {cell.value_size} B, {r.replicas} replica(s)",
                                        ["Figure", "value", "share"], rows, notes))
    return out


LAG, P50 = "lag_p50_us", "p50_us"
REPLICATION_SHORT = {"waitaof_p50_us": "WAITAOF p50", "waitaof_p99_us": "WAITAOF p99", "lag_p50_us": "lag p50"}


def _replication_line(workload: str, size: int, by: dict) -> tuple[tuple[str, str], str]:
    """The verdict's replication line of a cell: WAITAOF p50/p99 and the lag, each with its
    significance; why: the lag's note (analysis/verdict.lag_note)."""
    parts = []
    for m, label in REPLICATION_SHORT.items():
        v = by.get(m)
        if v is None or v.change_pct is None:
            continue
        parts.append(f"{label} {fmt_pct(v.change_pct)} ({v.base / 1e3:.2f} -> {v.cand / 1e3:.2f} ms) {SIG[v.significant]}")
    lag = by.get(LAG)
    note = say(lag.note) if lag and lag.note else ""
    return (f"{workload} {size} B replicated", "; ".join(parts)), note


def rule_line(inp: ReportInput) -> str:
    """How the verdict judged significance, said once: from the launches or from the repeats."""
    vs = inp.verdict or []
    with_launches = [v for v in vs if v.launches]
    if with_launches:
        nb, nc = with_launches[0].launches
        return (f"significance from the server launches: {nb} vs {nc}, interleaved; [lo, hi] is the 95% interval "
                "of the change (Welch's t over the launches, each the median of its repeats)")
    if vs:
        n = vs[0].n
        return (f"significance from the repeats of one launch each (n={n[0]} vs n={n[1]}): a change of "
                f"{MIN_EFFECT:.0%} or more with disjoint repeats or shifted interval samples; valkeytrace compare "
                "judges it from launches")
    return ""
