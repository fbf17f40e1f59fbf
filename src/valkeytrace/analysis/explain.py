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

from dataclasses import asdict

from valkeytrace.analysis import clauses as cl
from valkeytrace.analysis import model, offload
from valkeytrace.analysis.entry import Entry, Part
from valkeytrace.analysis.facts import (_evidence_main, caveats, durability_differs, fsync_placement, littles_law,
                                        offload_jobs, reply_blocking, set_mechanism, sets_per_fsync, side_durability,
                                        where)
from valkeytrace.analysis.note import Clause
from valkeytrace.analysis.tables import MEASURED_OP, CellSummary, Comparison, path_bound, significance
from valkeytrace.recording.model import decode


def side_model(doc, cell: CellSummary, op: str) -> model.Side:
    """op's p50 in cell, modelled from its median repeat(s), each with its own server figures
    (model.median_repeat); from the pooled repeats when a repeat lacks them (older recordings)."""
    most = model.max_iterations(doc)
    o = cell.ops[op]
    n = len(o.values.get("p50_us") or ())
    reps = [model.RepeatInput(r.repeat, r.launch, r.p50_us[op], r.mean_us.get(op), r.server, r.meet.get(op))
            for r in cell.per_repeat if r.p50_us.get(op) is not None and r.server
            and not model.unmodelled_reason(r.server)]
    if (not n or len(reps) != n) and cell.server is not None and o.median.p50_us is not None:
        reps = [model.RepeatInput(None, None, o.median.p50_us, o.median.mean_us, cell.server)]
    side = model.median_repeat(reps, most)
    jobs = offload.jobs(doc, cell.workload, cell.value_size) if op == "SET" else None
    wait = jobs.wait_us if jobs and jobs.wait_us else 0.0
    c = side.components
    resid = _residence(reps, side) if op == "SET" and (decode(doc).server.io_threads or 1) > 1 else None
    if resid is not None:
        # under I/O threads a reply leaves on an I/O thread: the kernel timed each write's hop from the
        # last sync's end to its reply (measured, not the residence less the rest); the batch's wait is
        # the shim's; what the client saw beyond the parts is outside them. The kernel's arrival-to-reply
        # (the residence) is kept beside, for the accounting to be held against (evidence.residence)
        total = sum(c.values())
        if wait:  # the batch's wait as the kernel timed it (read -> its job's end): the shim's jobs waited
            #       x a job's mean length counts a whole job for one already in flight
            c["offload_wait"] += _per_used(reps, side, "durable_wait_p50_us") or wait
        c[model.IO_HOP] = _per_used(reps, side, "release_hop_p50_us") or 0.0
        c["outside_server"] = total - sum(v for k, v in c.items() if k != "outside_server")
        side.residence_us = resid
    elif wait:
        # a durable offload: the SET's reply waited for its batch on the offload thread, which the
        # main thread's loop does not show; measured by the shim (jobs waited x their mean length)
        moved = min(wait, max(0.0, c["outside_server"]))
        c["offload_wait"] += moved
        c["outside_server"] -= moved
    return side


def _residence(reps: list, side: model.Side) -> float | None:
    """The kernel's median arrival-to-reply of the writes in the side's median repeat(s) (their mean
    when two), None when one of them has no timed writes."""
    return _per_used(reps, side, "residence_p50_us")


def _per_used(reps: list, side: model.Side, field: str) -> float | None:
    """A durability figure of the side's median repeat(s) (their mean when two), None when one lacks it."""
    used = {(u.repeat, u.launch) for u in side.used}
    vals = [getattr(r.server.durability, field) if r.server.durability else None
            for r in reps if (r.repeat, r.launch) in used]
    known = [v for v in vals if v is not None]
    return sum(known) / len(known) if known and len(known) == len(vals) else None


def side_inputs(side: model.Side) -> dict:
    """evidence.model_inputs.{baseline,candidate}: the (first) median repeat's inputs and how its k
    was chosen, the repeats used, and each of them when there are two (docs/report-json.md)."""
    first = side.used[0]
    out = {**first.inputs, "request_iterations": first.request_iterations.to_json(),
           "repeats": [u.repeat for u in side.used], "launches": [u.launch for u in side.used]}
    if len(side.used) > 1:
        out["per_repeat"] = [{"repeat": u.repeat, "launch": u.launch, "p50_us": u.p50_us, **u.inputs,
                              "request_iterations": u.request_iterations.to_json()} for u in side.used]
    return out


def model_check(doc, cell: CellSummary, op: str, sens: list | tuple, k: float, notes: list,
                label: str | None = None) -> cl.ModelCheck | None:
    """The model's assumptions against what the recording measured: I/O threads (outside the
    model's domain) and, with --fsync-sensitivity runs, the fsyncs per request the intervention
    measured against the model's k fsync cycles per request (sens: sensitivity.sensitivity(doc);
    k: side_model's); each check also a note. None when nothing to say."""
    checks: list[Clause] = []
    io = decode(doc).server.io_threads or 1
    if io > 1:
        checks.append(cl.IoThreads(io, k))
    for s in sens:
        if (s.workload, s.value_size, s.op, s.metric, s.thread_role) == \
                (cell.workload, cell.value_size, op, "p50_us", "main") and s.r2 >= 0.9:
            agree = "agrees" if abs(s.slope - k) <= 0.25 * k else "under" if s.slope > k else "over"
            checks.append(cl.Intervention(s.slope, s.r2, k, agree, op))
    notes += checks
    return cl.ModelCheck(checks, label) if checks else None


def _placed(server) -> list[dict]:
    """evidence.*.fsync_by_role: the roles that fsynced, as the report's JSON says them."""
    return [p.to_json() for p in fsync_placement(server)]


def _judged(row, metric: str, labels: tuple[str, str]) -> Clause:
    """How the change of metric was judged: from the launches, the paths, or the repeats."""
    sig, iv = row.significant[metric], row.interval[metric]
    if iv is not None:
        return cl.LaunchJudgement(iv.change_pct, iv.interval_pct, iv.launches, sig)
    if sig is False and metric == "p50_us" and path_bound(row.base, row.cand):
        return cl.paths(row.base, row.cand, labels)
    return cl.significance(sig, row.base.n, row.cand.n)


def _sides(op: str, metric: str, b: CellSummary, c: CellSummary, docs: tuple) -> list[Clause]:
    """The servers' own facts, a clause or more a side (and the SET's mechanism between them)."""
    base_doc, cand_doc = docs
    sides: list[Clause] = [where(f"Baseline ({base_doc.label})", b.server), where(f"Candidate ({cand_doc.label})", c.server)]
    for name, doc, cell in (("Baseline", base_doc, b), ("Candidate", cand_doc, c)):
        label = f"{name} ({doc.label})"
        sides += [x for x in ((side_durability(label, cell) if op == "SET" else None),
                              (offload_jobs(label, doc, cell) if op == "SET" else None),
                              reply_blocking(label, doc, cell)) if x]
    mechanism = set_mechanism(b, c) if op == "SET" and metric == "p50_us" else None
    return sides + ([mechanism] if mechanism else [])


def _said(out: list, notes: list, clause: Clause | None, noted: bool = True) -> None:
    """Say clause (when there is one) in the claim, and keep it among the entry's notes."""
    if clause is not None:
        out.append(clause)
        if noted:
            notes.append(clause)


def _host(out: list, notes: list, b: CellSummary, c: CellSummary, labels: tuple[str, str]) -> None:
    """Where the host's CPUs went on each side, then who waited for one."""
    _said(out, notes, cl.host_cpu(b, c, *labels))
    _said(out, notes, cl.cpu_wait(b, c))


def explain_metric(op: str, metric: str, row, b: CellSummary, c: CellSummary,
                   base_doc, cand_doc, sens: tuple = ((), ())) -> Entry | None:
    base_doc, cand_doc = decode(base_doc), decode(cand_doc)
    labels = (base_doc.label, cand_doc.label)
    bl, cand = row.base.median.get(metric), row.cand.median.get(metric)
    if bl is None or cand is None or b.server is None or c.server is None:
        return None
    sig = row.significant[metric]
    observed = cand - bl
    notes: list[Clause] = []
    head: list[Clause] = [cl.Change(op, metric, bl, cand)]
    judged = _judged(row, metric, labels)
    _said(head, notes, judged)
    if sig is False:
        moved = cl.throughput(op, row, b, c)
        _said(head, notes, moved)
        if moved:
            _host(head, notes, b, c, labels)
    if metric == "p50_us":  # a tail spreads from repeat to repeat anyway
        _said(head, notes, cl.spread(metric.replace("_us", ""), metric, row.base, row.cand, labels, (b, c)))
    sides = _sides(op, metric, b, c, (base_doc, cand_doc))
    evidence = {"baseline": {"label": labels[0], metric: bl, "main_thread": _evidence_main(b.server.main_thread),
                             "fsync_by_role": _placed(b.server)},
                "candidate": {"label": labels[1], metric: cand, "main_thread": _evidence_main(c.server.main_thread),
                              "fsync_by_role": _placed(c.server)},
                "observed_delta_us": observed}
    entry = Entry(b.workload, op, b.value_size, metric, "", [], rate=b.rate, sides=sides, evidence=evidence,
                  significant=sig, notes=notes)
    why_not = model.unmodelled_reason(b.server) or model.unmodelled_reason(c.server)
    if metric != "p50_us":
        entry.clauses = head + sides + [cl.TailNotModelled(metric, [b.server.main_thread.fdatasync_p99_us,
                                                                    c.server.main_thread.fdatasync_p99_us])]
        if sig:
            _host(entry.clauses, notes, b, c, labels)
        evidence["model"] = "tail.not_modelled"
    elif why_not:
        entry.clauses = head + sides + [cl.NotModelled(why_not)]
        evidence["model"] = f"not_modelled.{why_not}"
    else:
        entry.clauses = head + _accounted(entry, observed, b, c, (base_doc, cand_doc), sens) + sides
    entry.finding = ("tail.not_modelled" if metric != "p50_us" else "change.not_modelled" if why_not
                     else f"change.led_by.{entry.leading_component}" if sig and entry.leading_component
                     else {True: "change.significant", False: "change.not_significant"}.get(sig, "change.unknown"))
    return entry


def _accounted(entry: Entry, observed: float, b: CellSummary, c: CellSummary, docs: tuple, sens: tuple) -> list[Clause]:
    """The model's accounting of a p50 change into entry (components, shares, evidence); the clauses
    the claim says of it."""
    op, sig = entry.op, entry.significant
    sb, sc = side_model(docs[0], b, op), side_model(docs[1], c, op)
    comps = model.contributions(sb.components, sc.components)
    share = model.durability_share(comps, observed)
    lead = model.leading(comps, observed)
    # a change within noise gets no share; with n < 2 (unknown) the JSON keeps the accounting's
    # share beside significant: null, and the claim says it is no explanation
    keep = sig is not False
    on_server = model.server_share(comps, observed)
    entry.components = comps
    entry.leading_component = lead[0].name if keep else None
    entry.explained_share = round(share, 3) if keep and share is not None else None
    entry.server_share = round(on_server, 3) if keep and on_server is not None else None
    entry.evidence["model"] = "loop_units"  # each side's k and how it was chosen: model_inputs
    if sb.residence_us is not None and sc.residence_us is not None and sc.residence_us != sb.residence_us:
        parts = sum(x.delta_us for x in comps if x.name in model.SERVER_COMPONENTS)
        entry.evidence["residence"] = {"baseline_us": round(sb.residence_us, 1), "candidate_us": round(sc.residence_us, 1),
                                       "accounted_share": round(parts / (sc.residence_us - sb.residence_us), 3)}
    entry.evidence["model_inputs"] = {"baseline": side_inputs(sb), "candidate": side_inputs(sc)}
    out: list[Clause] = []
    notes = entry.notes
    if sig:
        _said(out, notes, cl.cause(comps, observed, share))
        if on_server is not None:
            out.append(cl.ServerShare(on_server))
    for doc, cell, side_sens, k in ((docs[0], b, sens[0], sb.k), (docs[1], c, sens[1], sc.k)):
        _said(out, notes, model_check(doc, cell, op, side_sens, k, notes, doc.label), noted=False)
    out += [cl.accounting(comps), cl.LoopUnits([cl.side_units(docs[0].label, sb), cl.side_units(docs[1].label, sc)])]
    if sig and lead[0].name in ("outside_server", "cpu_wait", "on_cpu"):
        _host(out, notes, b, c, (docs[0].label, docs[1].label))
    return out


def explain_compare(base_cells, cand_cells, cmp: Comparison, base_doc, cand_doc,
                    sens: tuple = ((), ())) -> list[Entry]:
    """sens: each recording's sensitivity.sensitivity entries (for the model's self-check)."""
    base_doc, cand_doc = decode(base_doc), decode(cand_doc)
    bmap = {c.key: c for c in base_cells}
    cmap = {c.key: c for c in cand_cells}
    entries = []
    dur = durability_differs(base_doc, cand_doc)
    for row in cmp.rows:
        b, c = bmap[(row.workload, row.value_size, row.rate)], cmap[(row.workload, row.value_size, row.rate)]
        if row.op != MEASURED_OP[row.workload]:
            continue
        if not (b.server and c.server):
            entries.append(Entry(row.workload, row.op, row.value_size, "p50_us", "no_server_trace",
                                 [cl.NoServerTrace()], rate=row.rate, significant=row.significant["p50_us"]))
            continue
        for metric in ("p50_us", "p99_us"):
            e = explain_metric(row.op, metric, row, b, c, base_doc, cand_doc, sens)
            if e is None:
                continue
            e.caveat_records = caveats([b, c], [base_doc, cand_doc]) + ([dur] if row.op == "SET" and dur else [])
            entries.append(e)
        gc = group_commit_entry(row, b, c, dur)
        if gc:
            entries.append(gc)
    return entries


def group_commit_entry(row, b: CellSummary, c: CellSummary, dur) -> Entry | None:
    if "SET" not in b.ops or "SET" not in c.ops:
        return None
    sb, sc = sets_per_fsync(b), sets_per_fsync(c)
    if sb is None and sc is None:
        return None
    tb, tc = b.ops["SET"].median.tps or 0.0, c.ops["SET"].median.tps or 0.0
    return Entry(row.workload, "SET", row.value_size, "sets_per_fsync", "group_commit",
                 [cl.GroupCommit([tb, tc], [sb, sc])] + ([dur] if dur else []), rate=row.rate,
                 evidence={"baseline": {"set_tps": tb, "sets_per_fsync": sb},
                           "candidate": {"set_tps": tc, "sets_per_fsync": sc}},
                 significant=significance(b.ops["SET"], c.ops["SET"], "tps"),
                 caveat_records=[dur] if dur else [])


def explain_run(cells: list[CellSummary], doc, sens: list | tuple = ()) -> list[Entry]:
    """Single recording: where each measured op's p50 goes, by component (explained_share: the
    fsync + AOF-write part of it). sens: the recording's sensitivity.sensitivity entries."""
    doc = decode(doc)
    entries = []
    for cell in cells:
        op = MEASURED_OP.get(cell.workload)
        if not op or op not in cell.ops or not cell.server:
            continue
        lat = cell.ops[op].median.p50_us
        if lat is None:
            continue
        why_not = model.unmodelled_reason(cell.server)
        notes: list[Clause] = []
        said: list[Clause] = [cl.RunHead(op, lat), where(doc.label, cell.server, lat)]
        _said(said, notes, offload_jobs(doc.label, doc, cell) if op == "SET" else None)
        comps: list[Part] = []
        share = None
        if why_not:
            said.append(cl.NotModelled(why_not))
        else:
            side = side_model(doc, cell, op)
            parts = side.components
            comps = [Part(n, round(v, 1)) for n, v in parts.items()]
            share = sum(parts[n] for n in model.DURABILITY) / lat if lat else None
            said.append(cl.Parts(list(parts.items()), parts["outside_server"] < -0.1 * lat))
            _said(said, notes, model_check(doc, cell, op, sens, side.k, notes), noted=False)
        entries.append(Entry(cell.workload, op, cell.value_size, "p50_us",
                             "p50.where" if not why_not else "p50.not_modelled", said, compared=False,
                             evidence={"p50_us": lat, "main_thread": _evidence_main(cell.server.main_thread),
                                       "fsync_by_role": _placed(cell.server), "sets_per_fsync": sets_per_fsync(cell),
                                       "littles_law": {op: asdict(x) for op, x in littles_law(cell).items()}},
                             components=comps, leading_component=max(comps, key=lambda x: x.us).name if comps else None,
                             explained_share=round(share, 3) if share is not None else None,
                             caveat_records=caveats([cell], [doc]), notes=notes))
    return entries
