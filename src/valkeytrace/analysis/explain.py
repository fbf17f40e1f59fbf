"""The causal account: which thread waited for what, and how much of each client percentile that
explains. Pure functions over analysed cells (analysis.tables + analysis.server).

Every entry is a claim that can come out wrong (docs/explain.md):
  - significance first (tables.significance): no causal claim for a change within noise, and
    none, only the accounting, when n < 2 on a side;
  - the accounting (analysis.model): each side's p50 split into main-thread components and what is
    left outside the server, adding up exactly; the change splits into signed contributions that
    add up to it; explained_share = the fsync + AOF-write contribution / the observed change,
    unclamped (> 1: the model over-predicts);
  - p99 is not modelled (the model is of a typical request); its entries give the tail facts;
  - the causal test is the intervention (analysis.sensitivity), the prediction analysis.whatif.
"""
from __future__ import annotations

from valkeytrace.analysis import model, offload
from valkeytrace.analysis.facts import (_evidence_main, _ms, _pct, _where, acks_before_fsync, caveat,  # noqa: F401
                                        caveat_words, caveats,
                                        durability_note, durability_sentence, fsync_placement, littles_law,
                                        offload_sentence, reply_blocking_sentence, server_view_gap,
                                        set_mechanism, sets_per_fsync)
from valkeytrace.analysis.tables import (MEASURED_OP, MIN_EFFECT, CellSummary, Comparison, path_bound,
                                         significance)

PLAUSIBLE_SHARE = (0.8, 1.2)  # outside it, the model over- or under-predicts the change


def significance_sentence(sig: bool | None, n_base: int, n_cand: int) -> str:
    if sig is None:
        return (f"significance unknown (n={n_base} vs n={n_cand}): record with --repeat 3; "
                "the accounting below is not an explanation")
    if not sig:
        return (f"no significant change (n={n_base} vs n={n_cand}: the medians differ by less than {MIN_EFFECT:.0%}, or "
                "the repeats' ranges overlap and the clients' interval samples are not shifted): nothing to explain")
    return (f"significant (n={n_base} vs n={n_cand}: the medians differ by {MIN_EFFECT:.0%} or more, and the repeats' "
            "ranges are disjoint or the clients' interval samples are shifted, rank test p < 0.01)")


def paths_sentence(row_base, row_cand, base_label: str, cand_label: str) -> str:
    """Why a p50 whose repeats lie on different paths of the server gets no significance."""
    sides = [f"{label} {' and '.join(f'{u:.2f}' for u in row.paths)}" for label, row in
             ((base_label, row_base), (cand_label, row_cand)) if row.paths]
    return (f"no significant change (n={row_base.n} vs n={row_cand.n}, one server launch a side): the repeats lie on "
            f"different paths of the server, their p50s in fsync cycles {'; '.join(sides)} (one cycle per request "
            "in some launches, two in others): a mode of the server cannot be told from a change in one launch; "
            "valkeytrace compare --launches 3 would tell (nothing to explain)")


def _fmt_delta(us: float) -> str:
    sign = "+" if us >= 0 else "\u2212"
    return sign + _ms(abs(us))


def _accounting_sentence(comps: list[dict]) -> str:
    parts = [f"{model.LABELS[c['name']]} {_fmt_delta(c['delta_us'])}" for c in comps if abs(c["delta_us"]) >= 0.5]
    return "Contributions to the change: " + (", ".join(parts) if parts else "none") + "."


def _cause_sentence(comps: list[dict], observed: float, share: float | None) -> str:
    lead = model.leading(comps, observed)
    top = [c for c in lead[:2] if abs(c["delta_us"]) >= 0.05 * abs(observed)] or lead[:1]
    named = " and ".join(f"{model.LABELS[c['name']]} ({_fmt_delta(c['delta_us'])})" for c in top)
    if share is None:
        return f"Leading: {named}."
    if lead[0]["name"] in model.DURABILITY and share >= 0.5:
        who = ("the wait for durable batches (write + fdatasync off the main thread) and the main thread's AOF "
               "work" if any(c["name"] == "offload_wait" and c["delta_us"] for c in comps) else
               "the main thread's AOF durability work")
        verdict = f"fsync: {who} account{'' if 'and' in who else 's'} for {share * 100:.0f}% of the change"
        lo, hi = PLAUSIBLE_SHARE
        if share > hi:
            verdict += " (the model over-predicts: the server-side terms move more than the clients saw)"
        elif share < lo:
            verdict += " (the rest: " + ", ".join(f"{model.LABELS[c['name']]} {_fmt_delta(c['delta_us'])}"
                                                   for c in lead[1:3]) + ")"
        return verdict[0].upper() + verdict[1:] + "."
    return f"Not fsync ({share * 100:.0f}% of the change): {named}."


def iterations_sentence(label: str, it: dict) -> str:
    """How the model chose k on one side: 'fsync-always: the mean GET spans 1.09 fsync cycles of
    5.11 ms: 91% of requests made the main thread's next poll, so the median one spends 1'; or
    the p50's own position when it contradicts the mean."""
    if it.get("mean_in_units") is None and it.get("p50_in_units") is None:
        return f"{label}: {it['k']:g} loop units per request (no loop time to measure it against)"
    units = f"{it['unit']}s of {_ms(it['unit_us'])}"
    if it.get("from") == "kernel":
        return (f"{label}: each write waited {it['k']:.2f} {units} from its arrival to its reply (the kernel's "
                "timestamps of every request)")
    if it.get("quick"):
        return (f"{label}: the median latency spans {it['p50_in_units']:.2f} {units}: the median request waited no "
                "fsync cycle (answered by iterations that executed no write), so it is taken to spend "
                f"{it['most']:g} plain iterations in the server and no fsync")
    if it.get("from") == "p50":
        mean = (f"; the mean latency, {it['mean_in_units']:.2f}, would have given {it['mean_k']:g}"
                if it.get("mean_k") is not None else "")
        return (f"{label}: the median latency spans {it['p50_in_units']:.2f} {units}, between the paths of "
                f"{it['most'] - 1:g} and {it['most']:g}: the median request came in during one and waited its rest and "
                f"the next, so {it['k']:.2f} are taken as time in the server{mean}")
    if it["mean_in_units"] >= it["most"]:
        return (f"{label}: the mean latency spans {it['mean_in_units']:.1f} {units}, so every request is taken to "
                f"spend {it['most']:g} in the server and the rest outside it")
    return (f"{label}: the mean latency spans {it['mean_in_units']:.2f} {units}: "
            f"{100 * it['shorter_path_share']:.0f}% of requests made the main thread's next poll, so the median "
            f"one spends {it['k']:g}")


def side_model(doc: dict, cell: CellSummary, op: str) -> dict:
    """op's p50 in cell, modelled from its median repeat(s), each with its own server figures
    (model.median_repeat); from the pooled repeats when a repeat lacks them (older recordings)."""
    most = model.max_iterations(doc)
    n = len(cell.ops[op].values.get("p50_us") or ())
    reps = [{"repeat": r["repeat"], "launch": r.get("launch"), "p50_us": r["p50_us"][op], "mean_us": r["mean_us"].get(op), "server": r["server"],
             "meet": (r.get("meet") or {}).get(op)}
            for r in cell.per_repeat if r["p50_us"].get(op) is not None and r.get("server")
            and not model.unmodelled_reason(r["server"])]
    if not n or len(reps) != n:
        reps = [{"repeat": None, "p50_us": cell.ops[op].median["p50_us"],
                 "mean_us": cell.ops[op].median.get("mean_us"), "server": cell.server}]
    side = model.median_repeat(reps, most)
    jobs = offload.jobs(doc, cell.workload, cell.value_size) if op == "SET" else None
    if jobs and jobs.wait_us:
        # a durable offload: the SET's reply waited for its batch on the offload thread, which the
        # main thread's loop does not show; measured by the shim (jobs waited x their mean length)
        c = side["components"]
        moved = min(jobs.wait_us, max(0.0, c["outside_server"]))
        c["offload_wait"] += moved
        c["outside_server"] -= moved
    return side


def run_name(u: dict) -> str:
    """A run as the report names it: its repeat, and its launch in an interleaved recording
    (compare's: each launch repeats from 1)."""
    if u.get("launch") is None:
        return f"repeat {u['repeat']}"
    return f"launch {u['launch']}" + (f" repeat {u['repeat']}" if (u["repeat"] or 1) > 1 else "")


def side_iterations_sentence(label: str, side: dict) -> str:
    used = sorted(side["used"], key=lambda u: (u.get("launch") or 0, u["repeat"] or 0))
    if len(used) == 1:
        return iterations_sentence(label, used[0]["request_iterations"])
    return (f"{label}, the median of {run_name(used[0])} and {run_name(used[1])} (p50 {_ms(used[0]['p50_us'])} "
            f"and {_ms(used[1]['p50_us'])}), each modelled on its own: "
            + "; ".join(iterations_sentence(run_name(u), u["request_iterations"]) for u in used))


def side_inputs(side: dict) -> dict:
    """evidence.model_inputs.{baseline,candidate}: the (first) median repeat's inputs and how its k
    was chosen, the repeats used, and each of them when there are two (docs/report-json.md)."""
    first = side["used"][0]
    out = {**first["inputs"], "request_iterations": first["request_iterations"],
           "repeats": [u["repeat"] for u in side["used"]], "launches": [u.get("launch") for u in side["used"]]}
    if len(side["used"]) > 1:
        out["per_repeat"] = [{"repeat": u["repeat"], "launch": u.get("launch"), "p50_us": u["p50_us"], **u["inputs"],
                              "request_iterations": u["request_iterations"]} for u in side["used"]]
    return out


def model_check(doc: dict, cell: CellSummary, op: str, sens: list[dict], k: float) -> str:
    """The model's assumptions against what the recording measured: I/O threads (outside the
    model's domain) and, with --fsync-sensitivity runs, the fsyncs per request the intervention
    measured against the model's k fsync cycles per request (sens: sensitivity.sensitivity(doc);
    k: side_model's).
    '' when nothing to say."""
    out = []
    io = (doc.get("server") or {}).get("io_threads") or 1
    if io > 1:
        out.append(f"with {io} I/O threads the query is read between two of the main thread's iterations "
                   f"(the model counts {k:g} loop units per request) and the main thread polls in between: the "
                   "model is rougher there")
    for s in sens:
        if (s["workload"], s["value_size"], s["op"], s["metric"], s["thread_role"]) == \
                (cell.workload, cell.value_size, op, "p50_us", "main") and s["r2"] >= 0.9:
            verdict = ("agrees" if abs(s["slope"] - k) <= 0.25 * k else
                       "so the model under-states the fsync's part" if s["slope"] > k else
                       "so the model over-states the fsync's part")
            out.append(f"the intervention measured {s['slope']:.2f} ms of {op} p50 per extra ms of main-thread "
                       f"fsync (R² {s['r2']:.2f}) against the model's {k:g} fsync cycle{'' if k == 1 else 's'} per "
                       f"request: {verdict}")
    return "; ".join(out) + "." if out else ""


CPU_PARTS = (("server_cores", "the server"), ("clients_cores", "the benchmark clients"),
             ("tracer_cores", "valkeytrace"), ("other_cores", "other processes"))


def host_cpu_sentence(b: CellSummary, c: CellSummary, base_label: str, cand_label: str) -> str:
    """Where the host's CPUs went on each side, and what took more of them."""
    hb, hc = b.host_cpu, c.host_cpu
    if not hb or not hc:
        return ""

    def side(label, h):
        parts = ", ".join(f"{name} {h[k]:.2f}" for k, name in CPU_PARTS if h.get(k) is not None)
        return f"{label} {h['host_cores']:.2f} of {h.get('cpus') or '?'} cores busy ({parts})"
    moved = [(hc[k] - hb[k], name) for k, name in CPU_PARTS if hb.get(k) is not None and hc.get(k) is not None]
    grew = [f"{name} +{d:.2f} cores" for d, name in sorted(moved, reverse=True) if d >= 0.1]
    return (f" Host CPU: {side(base_label, hb)}; {side(cand_label, hc)}"
            + (f": {', '.join(grew)}." if grew else ".") + cpu_wait_sentence(b, c))


def _clients(cell: CellSummary, role: str) -> str | None:
    """'the GET clients' (measured) or 'the background SET clients' of a cell, None without."""
    op = next((o.op for o in cell.ops.values() if o.role == role), None)
    return None if op is None else f"the {'background ' if role == 'background' else ''}{op} clients"


WAIT_LANDED_POINTS = 5.0  # a CPU-wait share that grew by this many points says where contention landed


def cpu_wait_sentence(b: CellSummary, c: CellSummary) -> str:
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
        xb, xc, who = (b.host_cpu or {}).get(key), (c.host_cpu or {}).get(key), _clients(b, role)
        if xb is not None and xc is not None and who:
            who_wait.append((who, 100 * xb, 100 * xc))
    if len(who_wait) < 2:  # the server's side alone is in the budget already
        return ""
    out = " Waiting for a CPU: " + ", ".join(f"{who} {x:.0f}% -> {y:.0f}%" for who, x, y in who_wait)
    grew = max(who_wait, key=lambda w: w[2] - w[1])
    if grew[2] - grew[1] >= WAIT_LANDED_POINTS:
        out += f": it landed mostly on {grew[0]} (+{grew[2] - grew[1]:.0f} points)"
    return out + "."


def throughput_sentence(op: str, row, b: CellSummary, c: CellSummary, base_doc: dict, cand_doc: dict) -> str:
    """When the latency did not move but the op's throughput did: where the requests went (the
    clients in flight, by Little's law) and who took the host's CPU. '' otherwise."""
    if row.significant["tps"] is not True:
        return ""
    tb, tc = row.base.median["tps"], row.cand.median["tps"]
    out = (f" But {op} TPS moved significantly, {tb / 1000:.1f}K/s -> {tc / 1000:.1f}K/s "
           f"({_pct(100 * (tc - tb) / tb)})")
    mb, mc = row.base.median.get("mean_us"), row.cand.median.get("mean_us")
    if mb and mc:
        out += f", and the mean latency {_ms(mb)} -> {_ms(mc)} ({_pct(100 * (mc - mb) / mb)}): not the median request"
    lb, lc = littles_law(b).get(op), littles_law(c).get(op)
    if lb and lc:
        out += (f"; the clients kept {lb['in_flight']:.0f} -> {lc['in_flight']:.0f} of {lc['clients']} requests "
                "in flight (TPS x mean latency): the rest of the time is the clients' own")
    return out + "." + host_cpu_sentence(b, c, base_doc["label"], cand_doc["label"])


SPREAD_RATIO = 1.5  # a side whose repeats span more than this (max / min) disagrees with itself


def spread_sentence(name: str, metric: str, row_base, row_cand, base_label: str, cand_label: str,
                    cells: tuple = (None, None)) -> str:
    """When a side's repeats disagree (max / min above SPREAD_RATIO: a metric with two modes, say
    GET p50 under CPU contention, where it depends on which CPU the scheduler gives whom), the
    median of a few repeats can land in either mode: say so, and (for a p50, with the cells) who
    waited for a CPU in each of that side's repeats. '' otherwise."""
    wide, detail = [], []
    for label, row, cell in ((base_label, row_base, cells[0]), (cand_label, row_cand, cells[1])):
        lo_hi = row.spread.get(metric)
        if row.n >= 2 and lo_hi and lo_hi[0] > 0 and lo_hi[1] / lo_hi[0] > SPREAD_RATIO:
            wide.append(f"{label} {_ms(lo_hi[0])}-{_ms(lo_hi[1])}")
            if cell is not None and metric == "p50_us":
                per = repeats_waiting(cell, row.op)
                if per:
                    detail.append(f"{label}, per repeat: {per}")
    if not wide:
        return ""
    return (f" The repeats disagree ({name}: {'; '.join(wide)}): the median of {row_base.n} vs {row_cand.n} can land "
            "in either mode; more repeats (--repeat 5 or more) would tell."
            + (f" Waiting for a CPU, {'; '.join(detail)}." if detail else ""))


def repeats_waiting(cell: CellSummary, op: str) -> str:
    """'1.03 ms (main thread 27%, GET clients 10%), 463 µs (16%, 45%)': each repeat's p50 of op
    with the main thread's and the measured clients' CPU-wait shares; '' without them."""
    rows = [r for r in cell.per_repeat if r["p50_us"].get(op) is not None
            and r["main_cpu_wait_pct"] is not None and r["measured_client_wait"] is not None]
    if len(rows) < 2 or not _clients(cell, "measured"):
        return ""
    first, rest = rows[0], rows[1:]
    who = _clients(cell, "measured").removeprefix("the ")
    out = [f"{_ms(first['p50_us'][op])} (main thread {first['main_cpu_wait_pct']:.0f}%, "
           f"{who} {100 * first['measured_client_wait']:.0f}%)"]
    out += [f"{_ms(r['p50_us'][op])} ({r['main_cpu_wait_pct']:.0f}%, {100 * r['measured_client_wait']:.0f}%)" for r in rest]
    return ", ".join(out)


def explain_metric(op: str, metric: str, row, b: CellSummary, c: CellSummary,
                   base_doc: dict, cand_doc: dict, sens: tuple = ((), ())) -> dict | None:
    row_base, row_cand = row.base, row.cand
    bl, cl = row_base.median.get(metric), row_cand.median.get(metric)
    if bl is None or cl is None:
        return None
    name = metric.replace("_us", "")
    sig = row.significant[metric]
    observed = cl - bl
    iv = row.interval[metric]
    if iv is not None:
        lo, hi = iv["interval_pct"]
        judged = (f"{'significant' if sig else 'no significant change'} ({iv['launches'][0]} vs {iv['launches'][1]} "
                  f"server launches: the change of their means {_pct(iv['change_pct'])}, 95% interval "
                  f"[{lo:+.1f}%, {hi:+.1f}%]{'' if sig else ': nothing to explain'})")
    elif sig is False and metric == "p50_us" and path_bound(row_base, row_cand):
        judged = paths_sentence(row_base, row_cand, base_doc["label"], cand_doc["label"])
    else:
        judged = significance_sentence(sig, row_base.n, row_cand.n)
    head = f"{op} {name} {_ms(bl)} -> {_ms(cl)} ({_pct(100 * observed / bl)}): " + judged + "."
    if sig is False:
        head += throughput_sentence(op, row, b, c, base_doc, cand_doc)
    if metric == "p50_us":  # a tail spreads from repeat to repeat anyway
        head += spread_sentence(name, metric, row_base, row_cand, base_doc["label"], cand_doc["label"], (b, c))
    sides = [_where(f"Baseline ({base_doc['label']})", b.server), _where(f"Candidate ({cand_doc['label']})", c.server)]
    for name, doc, cell in (("Baseline", base_doc, b), ("Candidate", cand_doc, c)):
        label = f"{name} ({doc['label']})"
        sides += [x for x in ((durability_sentence(label, cell) if op == "SET" else ""),
                              (offload_sentence(label, doc, cell) if op == "SET" else ""),
                              reply_blocking_sentence(label, doc, cell)) if x]
    if op == "SET" and metric == "p50_us" and set_mechanism(b, c):
        sides.append(set_mechanism(b, c))
    context = " " + " ".join(sides)
    evidence = {"baseline": {"label": base_doc["label"], metric: bl, "main_thread": _evidence_main(b.server.main_thread),
                             "fsync_by_role": fsync_placement(b.server)},
                "candidate": {"label": cand_doc["label"], metric: cl, "main_thread": _evidence_main(c.server.main_thread),
                              "fsync_by_role": fsync_placement(c.server)},
                "observed_delta_us": observed}
    entry = {"significant": sig, "components": [], "leading_component": None, "explained_share": None,
             "server_share": None}
    why_not = model.unmodelled_reason(b.server) or model.unmodelled_reason(c.server)
    if metric != "p50_us":
        claim = head + context + (f" The {name} is not modelled: the model is of a typical request (one to three loop "
                                  "iterations); the tail follows the fsync and iteration tails "
                                  f"(main fdatasync p99 {_ms(b.server.main_thread.fdatasync_p99_us)} -> "
                                  f"{_ms(c.server.main_thread.fdatasync_p99_us)}); "
                                  "record --fsync-sensitivity measures its slope.")
        if sig:
            claim += host_cpu_sentence(b, c, base_doc["label"], cand_doc["label"])
        evidence["model"] = "not modelled (tail)"
    elif why_not:
        claim = head + context + f" Not modelled: {why_not}."
        evidence["model"] = f"not modelled: {why_not}"
    else:
        sb, sc = side_model(base_doc, b, op), side_model(cand_doc, c, op)
        kb, kc = sb["k"], sc["k"]
        comps = model.contributions(sb["components"], sc["components"])
        share = model.durability_share(comps, observed)
        lead = model.leading(comps, observed)
        # a change within noise gets no share; with n < 2 (unknown) the JSON keeps the accounting's
        # share beside significant: null, and the claim says it is no explanation
        keep = sig is not False
        on_server = model.server_share(comps, observed)
        entry.update(components=comps, leading_component=lead[0]["name"] if keep else None,
                     explained_share=round(share, 3) if keep and share is not None else None,
                     server_share=round(on_server, 3) if keep and on_server is not None else None)
        evidence["model"] = (f"{kb:g} (baseline) and {kc:g} (candidate) main-thread loop units (fsync cycles, or "
                             "iterations without main-thread fsyncs) per median request, from each side's median "
                             "repeat(s) and their mean latency in units; the rest outside the server "
                             "(analysis/model.py)")
        evidence["model_inputs"] = {"baseline": side_inputs(sb), "candidate": side_inputs(sc)}
        claim = head
        if sig:
            claim += " " + _cause_sentence(comps, observed, share)
            if on_server is not None:
                claim += f" The server's threads account for {on_server * 100:.0f}% of the change."
        for label, doc, cell, side_sens, k in ((base_doc["label"], base_doc, b, sens[0], kb),
                                               (cand_doc["label"], cand_doc, c, sens[1], kc)):
            check = model_check(doc, cell, op, side_sens, k)
            if check:
                claim += f" {label}: {check}"
        claim += (" " + _accounting_sentence(comps) + " Loop units per request: "
                  + side_iterations_sentence(base_doc["label"], sb) + "; "
                  + side_iterations_sentence(cand_doc["label"], sc) + "."
                  + context)
        if sig and lead[0]["name"] in ("outside_server", "cpu_wait", "on_cpu"):
            claim += host_cpu_sentence(b, c, base_doc["label"], cand_doc["label"])
    finding = ("tail.not_modelled" if metric != "p50_us" else "change.not_modelled" if why_not
               else f"change.led_by.{entry['leading_component']}" if sig and entry["leading_component"]
               else {True: "change.significant", False: "change.not_significant"}.get(sig, "change.unknown"))
    return {"workload": b.workload, "op": op, "value_size": b.value_size, "rate": b.rate, "metric": metric,
            "finding": finding,
            "claim": claim, "sides": sides, "evidence": evidence, **entry}


def explain_compare(base_cells, cand_cells, cmp: Comparison, base_doc: dict, cand_doc: dict,
                    sens: tuple = ((), ())) -> list[dict]:
    """sens: each recording's sensitivity.sensitivity entries (for the model's self-check)."""
    bmap = {c.key: c for c in base_cells}
    cmap = {c.key: c for c in cand_cells}
    entries = []
    dur = durability_note(base_doc, cand_doc)
    for row in cmp.rows:
        b, c = bmap[(row.workload, row.value_size, row.rate)], cmap[(row.workload, row.value_size, row.rate)]
        if row.op != MEASURED_OP[row.workload]:
            continue
        if not (b.server and c.server):
            entries.append({"workload": row.workload, "op": row.op, "value_size": row.value_size, "rate": row.rate,
                            "metric": "p50_us", "finding": "no_server_trace",
                            "claim": "no server-side trace in one of the recordings "
                            "(--backend none): the client change cannot be attributed",
                            "evidence": {}, "explained_share": None, "significant": row.significant["p50_us"],
                            "components": [], "leading_component": None, **with_caveats([])})
            continue
        for metric in ("p50_us", "p99_us"):
            e = explain_metric(row.op, metric, row, b, c, base_doc, cand_doc, sens)
            if e is None:
                continue
            e.update(with_caveats(caveats([b, c], [base_doc, cand_doc])
                                  + ([caveat("durability_differs", None, dur)] if row.op == "SET" and dur else [])))
            entries.append(e)
        gc = group_commit_entry(row, b, c, base_doc, cand_doc, dur)
        if gc:
            entries.append(gc)
    return entries


def group_commit_entry(row, b: CellSummary, c: CellSummary, base_doc, cand_doc, dur) -> dict | None:
    if "SET" not in b.ops or "SET" not in c.ops:
        return None
    sb, sc = sets_per_fsync(b), sets_per_fsync(c)
    if sb is None and sc is None:
        return None
    tb, tc = b.ops["SET"].median["tps"], c.ops["SET"].median["tps"]
    few = "too few fsyncs to count"
    claim = (f"SET throughput {tb / 1000:.2f}K/s -> {tc / 1000:.2f}K/s; SETs per fsync (group commit) "
             f"{few if sb is None else f'{sb:.1f}'} -> {few if sc is None else f'{sc:.1f}'}: "
             "each fsync covers more SETs when the main thread keeps accepting writes during it.")
    if dur:
        claim += " " + dur[0].upper() + dur[1:] + "."
    return {"workload": row.workload, "op": "SET", "value_size": row.value_size, "rate": row.rate, "metric": "sets_per_fsync",
            "finding": "group_commit", "claim": claim, "evidence": {"baseline": {"set_tps": tb, "sets_per_fsync": sb},
                                         "candidate": {"set_tps": tc, "sets_per_fsync": sc}},
            "explained_share": None, "significant": significance(b.ops["SET"], c.ops["SET"], "tps"),
            "components": [], "leading_component": None,
            **with_caveats([caveat("durability_differs", None, dur)] if dur else [])}


def explain_run(cells: list[CellSummary], doc: dict, sens: list[dict] = ()) -> list[dict]:
    """Single recording: where each measured op's p50 goes, by component (explained_share: the
    fsync + AOF-write part of it). sens: the recording's sensitivity.sensitivity entries."""
    entries = []
    for cell in cells:
        op = MEASURED_OP.get(cell.workload)
        if not op or op not in cell.ops or not cell.server:
            continue
        lat = cell.ops[op].median["p50_us"]
        if lat is None:
            continue
        why_not = model.unmodelled_reason(cell.server)
        claim = f"{op} p50 {_ms(lat)}. " + _where(doc["label"], cell.server, lat)
        if op == "SET" and offload_sentence(doc["label"], doc, cell):
            claim += " " + offload_sentence(doc["label"], doc, cell)
        comps, share = [], None
        if why_not:
            claim += f" Not modelled: {why_not}."
        else:
            side = side_model(doc, cell, op)
            parts = side["components"]
            comps = [{"name": n, "us": round(v, 1)} for n, v in parts.items()]
            share = sum(parts[n] for n in model.DURABILITY) / lat if lat else None
            claim += (" Of it: " + ", ".join(f"{model.LABELS[n]} {_ms(v) if v >= 0 else _fmt_delta(v)}"
                                             for n, v in parts.items() if abs(v) >= 0.5) + ".")
            if parts["outside_server"] < -0.1 * lat:
                claim += " (The server-side terms exceed the latency: the model over-predicts here.)"
            check = model_check(doc, cell, op, sens, side["k"])
            if check:
                claim += " " + check[0].upper() + check[1:]
        entries.append({"workload": cell.workload, "op": op, "value_size": cell.value_size, "metric": "p50_us",
                        "finding": "p50.where" if not why_not else "p50.not_modelled", "claim": claim,
                        "evidence": {"p50_us": lat, "main_thread": _evidence_main(cell.server.main_thread),
                                     "fsync_by_role": fsync_placement(cell.server),
                                     "sets_per_fsync": sets_per_fsync(cell),
                                     "littles_law": littles_law(cell)},
                        "components": comps, "leading_component": max(comps, key=lambda x: x["us"])["name"] if comps else None,
                        "explained_share": round(share, 3) if share is not None else None,
                        "significant": None,
                        **with_caveats(caveats([cell], [doc]))})
    return entries


def with_caveats(records: list[dict]) -> dict:
    """An entry's caveats: the records (caveat_records: code, side, words) and their sentences."""
    return {"caveat_records": records, "caveats": [caveat_words(c) for c in records]}
