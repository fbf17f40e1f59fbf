"""The explanation's words, each with the code and figures it says (words.Note): the significance
rule that decided a change, the cause the accounting names, the throughput that moved when the
latency did not, where the host's CPUs went and who waited for one, repeats that disagree, and how
the model chose its loop units. analysis/explain.py records the notes on each entry (Entry.notes:
what tests and tools read) and joins the sentences into its claim."""
from __future__ import annotations

from valkeytrace.analysis import model
from valkeytrace.analysis.facts import Note, _ms, _pct, littles_law
from valkeytrace.analysis.tables import MIN_EFFECT, CellSummary

PLAUSIBLE_SHARE = (0.8, 1.2)  # outside it, the model over- or under-predicts the change


def _add(notes: list | None, code: str, **figures) -> None:
    if notes is not None:
        notes.append(Note(code, figures))


def significance_sentence(sig: bool | None, n_base: int, n_cand: int, notes: list | None = None) -> str:
    _add(notes, {None: "significance.unknown", False: "significance.none"}.get(sig, "significance.repeats"),
         n=[n_base, n_cand])
    if sig is None:
        return (f"significance unknown (n={n_base} vs n={n_cand}): record with --repeat 3; "
                "the accounting below is not an explanation")
    if not sig:
        return (f"no significant change (n={n_base} vs n={n_cand}: the medians differ by less than {MIN_EFFECT:.0%}, or "
                "the repeats' ranges overlap and the clients' interval samples are not shifted): nothing to explain")
    return (f"significant (n={n_base} vs n={n_cand}: the medians differ by {MIN_EFFECT:.0%} or more, and the repeats' "
            "ranges are disjoint or the clients' interval samples are shifted, rank test p < 0.01)")


def paths_sentence(row_base, row_cand, base_label: str, cand_label: str, notes: list | None = None) -> str:
    """Why a p50 whose repeats lie on different paths of the server gets no significance."""
    _add(notes, "significance.paths", paths=[list(row_base.paths), list(row_cand.paths)], n=[row_base.n, row_cand.n])
    sides = [f"{label} {' and '.join(f'{u:.2f}' for u in row.paths)}" for label, row in
             ((base_label, row_base), (cand_label, row_cand)) if row.paths]
    return (f"no significant change (n={row_base.n} vs n={row_cand.n}, one server launch a side): the repeats lie on "
            f"different paths of the server, their p50s in fsync cycles {'; '.join(sides)} (one cycle per request "
            "in some launches, two in others): a mode of the server cannot be told from a change in one launch; "
            "valkeytrace compare --launches 3 would tell (nothing to explain)")


def _fmt_delta(us: float) -> str:
    sign = "+" if us >= 0 else "\u2212"
    return sign + _ms(abs(us))


def _accounting_sentence(comps: list[model.Contribution]) -> str:
    parts = [f"{model.LABELS[c.name]} {_fmt_delta(c.delta_us)}" for c in comps if abs(c.delta_us) >= 0.5]
    return "Contributions to the change: " + (", ".join(parts) if parts else "none") + "."


def _cause_sentence(comps: list[model.Contribution], observed: float, share: float | None,
                    notes: list | None = None) -> str:
    lead = model.leading(comps, observed)
    top = [c for c in lead[:2] if abs(c.delta_us) >= 0.05 * abs(observed)] or lead[:1]
    named = " and ".join(f"{model.LABELS[c.name]} ({_fmt_delta(c.delta_us)})" for c in top)
    if share is None:
        _add(notes, "cause.leading", components=[c.name for c in top])
        return f"Leading: {named}."
    fsync_led = lead[0].name in model.DURABILITY and share >= 0.5
    lo, hi = PLAUSIBLE_SHARE
    _add(notes, "cause.fsync" if fsync_led else "cause.not_fsync", share=share, components=[c.name for c in top],
         fit="over" if fsync_led and share > hi else "under" if fsync_led and share < lo else "plausible")
    if fsync_led:
        who = ("the wait for durable batches (write + fdatasync off the main thread) and the main thread's AOF "
               "work" if any(c.name == "offload_wait" and c.delta_us for c in comps) else
               "the main thread's AOF durability work")
        verdict = f"fsync: {who} account{'' if 'and' in who else 's'} for {share * 100:.0f}% of the change"
        lo, hi = PLAUSIBLE_SHARE
        if share > hi:
            verdict += " (the model over-predicts: the server-side terms move more than the clients saw)"
        elif share < lo:
            verdict += " (the rest: " + ", ".join(f"{model.LABELS[c.name]} {_fmt_delta(c.delta_us)}"
                                                   for c in lead[1:3]) + ")"
        return verdict[0].upper() + verdict[1:] + "."
    return f"Not fsync ({share * 100:.0f}% of the change): {named}."


def iterations_sentence(label: str, it: model.RequestIterations) -> str:
    """How the model chose k on one side: 'fsync-always: the mean GET spans 1.09 fsync cycles of
    5.11 ms: 91% of requests made the main thread's next poll, so the median one spends 1'; or
    the p50's own position when it contradicts the mean."""
    if it.mean_in_units is None and it.p50_in_units is None:
        return f"{label}: {it.k:g} loop units per request (no loop time to measure it against)"
    units = f"{it.unit}s of {_ms(it.unit_us)}"
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


CPU_PARTS = (("server_cores", "the server"), ("clients_cores", "the benchmark clients"),
             ("tracer_cores", "valkeytrace"), ("other_cores", "other processes"))


def host_cpu_sentence(b: CellSummary, c: CellSummary, base_label: str, cand_label: str,
                      notes: list | None = None) -> str:
    """Where the host's CPUs went on each side, and what took more of them."""
    hb, hc = b.host_cpu, c.host_cpu
    if not hb or not hc:
        return ""

    def side(label, h):
        parts = ", ".join(f"{name} {getattr(h, k):.2f}" for k, name in CPU_PARTS if getattr(h, k) is not None)
        return f"{label} {h.host_cores or 0:.2f} of {h.cpus or '?'} cores busy ({parts})"
    moved = [(getattr(hc, k) - getattr(hb, k), name) for k, name in CPU_PARTS
             if getattr(hb, k) is not None and getattr(hc, k) is not None]
    grew = [f"{name} +{d:.2f} cores" for d, name in sorted(moved, reverse=True) if d >= 0.1]
    _add(notes, "host_cpu", grew={name: round(d, 2) for d, name in moved if d >= 0.1})
    return (f" Host CPU: {side(base_label, hb)}; {side(cand_label, hc)}"
            + (f": {', '.join(grew)}." if grew else ".") + cpu_wait_sentence(b, c, notes))


def _clients(cell: CellSummary, role: str) -> str | None:
    """'the GET clients' (measured) or 'the background SET clients' of a cell, None without."""
    op = next((o.op for o in cell.ops.values() if o.role == role), None)
    return None if op is None else f"the {'background ' if role == 'background' else ''}{op} clients"


WAIT_LANDED_POINTS = 5.0  # a CPU-wait share that grew by this many points says where contention landed


def cpu_wait_sentence(b: CellSummary, c: CellSummary, notes: list | None = None) -> str:
    """Who waited for a CPU on each side: the server's main thread (% of the window, the tracer)
    and the benchmark clients (% of their own time, schedstat). On a host short of CPUs the same
    contention lands on either: on the main thread it delays every request; on the clients it
    cuts how many requests they keep in flight and the latency of each may not move at all."""
    who_wait = []
    mb = b.server.main_thread.waiting_for_cpu_pct if b.server else None
    mc = c.server.main_thread.waiting_for_cpu_pct if c.server else None
    if mb is not None and mc is not None:
        who_wait.append(("the main thread", mb, mc))
    for key, role in (("measured_client_wait", "measured"), ("background_client_wait", "background")):
        xb, xc, who = getattr(b.host_cpu, key, None), getattr(c.host_cpu, key, None), _clients(b, role)
        if xb is not None and xc is not None and who:
            who_wait.append((who, 100 * xb, 100 * xc))
    if len(who_wait) < 2:  # the server's side alone is in the budget already
        return ""
    out = " Waiting for a CPU: " + ", ".join(f"{who} {x:.0f}% -> {y:.0f}%" for who, x, y in who_wait)
    grew = max(who_wait, key=lambda w: w[2] - w[1])
    landed = grew[2] - grew[1] >= WAIT_LANDED_POINTS
    _add(notes, "cpu_wait", waits={who: [round(x, 1), round(y, 1)] for who, x, y in who_wait},
         landed_on=grew[0] if landed else None, points=round(grew[2] - grew[1], 1))
    if landed:
        out += f": it landed mostly on {grew[0]} (+{grew[2] - grew[1]:.0f} points)"
    return out + "."


def throughput_sentence(op: str, row, b: CellSummary, c: CellSummary, labels: tuple[str, str],
                        notes: list | None = None) -> str:
    """When the latency did not move but the op's throughput did: where the requests went (the
    clients in flight, by Little's law) and who took the host's CPU. '' otherwise."""
    if row.significant[TPS] is not True:
        return ""
    tb, tc = row.base.median.tps or 0.0, row.cand.median.tps or 0.0
    _add(notes, "throughput_moved", tps=[tb, tc], mean_us=[row.base.median.mean_us, row.cand.median.mean_us])
    out = (f" But {op} TPS moved significantly, {tb / 1000:.1f}K/s -> {tc / 1000:.1f}K/s "
           f"({_pct(100 * (tc - tb) / tb)})")
    mb, mc = row.base.median.mean_us, row.cand.median.mean_us
    if mb and mc:
        out += f", and the mean latency {_ms(mb)} -> {_ms(mc)} ({_pct(100 * (mc - mb) / mb)}): not the median request"
    lb, lc = littles_law(b).get(op), littles_law(c).get(op)
    if lb and lc:
        out += (f"; the clients kept {lb.in_flight:.0f} -> {lc.in_flight:.0f} of {lc.clients} requests "
                "in flight (TPS x mean latency): the rest of the time is the clients' own")
    return out + "." + host_cpu_sentence(b, c, *labels, notes)


TPS = "tps"


SPREAD_RATIO = 1.5  # a side whose repeats span more than this (max / min) disagrees with itself


def spread_sentence(name: str, metric: str, row_base, row_cand, base_label: str, cand_label: str,
                    cells: tuple = (None, None), notes: list | None = None) -> str:
    """When a side's repeats disagree (max / min above SPREAD_RATIO: a metric with two modes, say
    GET p50 under CPU contention, where it depends on which CPU the scheduler gives whom), the
    median of a few repeats can land in either mode: say so, and (for a p50, with the cells) who
    waited for a CPU in each of that side's repeats. '' otherwise."""
    wide, detail, who = [], [], {}
    for label, row, cell in ((base_label, row_base, cells[0]), (cand_label, row_cand, cells[1])):
        lo_hi = row.spread.get(metric)
        if row.n >= 2 and lo_hi and lo_hi[0] > 0 and lo_hi[1] / lo_hi[0] > SPREAD_RATIO:
            wide.append(f"{label} {_ms(lo_hi[0])}-{_ms(lo_hi[1])}")
            who[label] = [lo_hi[0], lo_hi[1]]
            if cell is not None and metric == "p50_us":
                per = repeats_waiting(cell, row.op)
                if per:
                    detail.append(f"{label}, per repeat: {per}")
    if not wide:
        return ""
    _add(notes, "repeats_disagree", spread=who, per_repeat=bool(detail))
    return (f" The repeats disagree ({name}: {'; '.join(wide)}): the median of {row_base.n} vs {row_cand.n} can land "
            "in either mode; more repeats (--repeat 5 or more) would tell."
            + (f" Waiting for a CPU, {'; '.join(detail)}." if detail else ""))


def repeats_waiting(cell: CellSummary, op: str) -> str:
    """'1.03 ms (main thread 27%, GET clients 10%), 463 µs (16%, 45%)': each repeat's p50 of op
    with the main thread's and the measured clients' CPU-wait shares; '' without them."""
    rows = [r for r in cell.per_repeat if r.p50_us.get(op) is not None
            and r.main_cpu_wait_pct is not None and r.measured_client_wait is not None]
    clients = _clients(cell, "measured")
    if len(rows) < 2 or not clients:
        return ""
    first, rest = rows[0], rows[1:]
    who = clients.removeprefix("the ")
    out = [f"{_ms(first.p50_us[op])} (main thread {first.main_cpu_wait_pct or 0:.0f}%, "
           f"{who} {100 * (first.measured_client_wait or 0):.0f}%)"]
    out += [f"{_ms(r.p50_us[op])} ({r.main_cpu_wait_pct or 0:.0f}%, {100 * (r.measured_client_wait or 0):.0f}%)"
            for r in rest]
    return ", ".join(out)


