"""The causal account: which thread waited for what, and how much of each client percentile that
explains. Pure functions over analysed cells (analysis.tables + analysis.server).

The attribution model (docs/explain.md):
  A request waits for event-loop iterations of the main thread. Whatever fraction f of the main
  thread's wall time goes to blocking AOF durability work (blocked in fdatasync/fsync, or in an
  AOF write) is, to first order, the same fraction of every request's wait: a GET arriving at a
  random instant waits for the iteration in progress, then for its own, and each iteration is
  f parts durability stall. So the part of a client latency L attributable to main-thread AOF
  blocking is  A = f x L.
  For a comparison, the server-side change predicts  dA = A_cand - A_base, the client saw
  dL = L_cand - L_base, and  explained_share = clamp(dA / dL, 0, 1)  (0 when the two move in
  opposite directions or dL is within 1%).
"""
from __future__ import annotations

from valkeytrace.analysis.tables import MEASURED_OP, CellSummary, Comparison

MIN_CHANGE = 0.01  # |dL| below 1% of the baseline: nothing to explain


def durability_fraction(main: dict) -> float:
    return ((main.get("blocked_in_fsync_pct") or 0.0) + (main.get("blocked_in_aof_write_pct") or 0.0)) / 100.0


def attributable_us(latency_us: float, main: dict) -> float:
    return latency_us * durability_fraction(main)


def explained_share(base_lat: float, cand_lat: float, base_main: dict, cand_main: dict) -> float:
    actual = cand_lat - base_lat
    if base_lat <= 0 or abs(actual) < MIN_CHANGE * base_lat:
        return 0.0
    predicted = attributable_us(cand_lat, cand_main) - attributable_us(base_lat, base_main)
    share = predicted / actual
    return max(0.0, min(1.0, share))


def fsync_placement(server: dict) -> list[dict]:
    """Which thread roles made fdatasync/fsync calls, with counts and rates."""
    wall_s = (server["main_thread"]["wall_ms"] or 0) / 1000.0
    out = []
    for t in server["threads"]:
        n = t["fdatasync"]["count"] + t["fsync"]["count"]
        if n:
            p50 = t["fdatasync"]["p50_us"] if t["fdatasync"]["count"] else t["fsync"]["p50_us"]
            out.append({"role": t["role"], "count": n, "per_s": n / wall_s if wall_s else None, "p50_us": p50})
    return sorted(out, key=lambda x: -x["count"])


def littles_law(cell: CellSummary) -> dict:
    """TPS x mean latency against the number of clients, per measured op (closed-loop clients)."""
    out = {}
    for op, o in cell.ops.items():
        mean, tps = o.median.get("mean_us"), o.median.get("tps")
        if tps and mean and o.clients:
            in_flight = tps * mean / 1e6
            out[op] = {"tps": tps, "mean_us": mean, "clients": o.clients, "in_flight": in_flight,
                       "ratio": in_flight / o.clients}
    return out


def _ms(us: float | None) -> str:
    if us is None:
        return "n/a"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def _pct(x: float) -> str:
    return f"{x:+.0f}%".replace("-", "\u2212")


def _where(label: str, server: dict, latency_us: float | None = None) -> str:
    """One sentence: where the fsyncs ran and what the main thread did (and, given a latency,
    how many time-weighted loop iterations it spans)."""
    m = server["main_thread"]
    place = fsync_placement(server)
    f_pct = (m["blocked_in_fsync_pct"] or 0)
    parts = []
    if any(p["role"] == "main" for p in place):
        p = next(p for p in place if p["role"] == "main")
        parts.append(f"the main thread spent {f_pct:.0f}% of wall time blocked in fdatasync "
                     f"({p['per_s']:.0f}/s, p50 {_ms(p['p50_us'])})")
    else:
        parts.append("the main thread is never blocked in fsync")
    others = [p for p in place if p["role"] != "main"]
    for p in others:
        parts.append(f"fdatasync runs on {p['role']} ({p['per_s']:.1f}/s, p50 {_ms(p['p50_us'])})")
    if not place:
        parts.append("no thread called fsync in the window")
    if m.get("loop_iteration_tw_p50_us"):
        parts.append(f"loop iteration p50 {_ms(m['loop_iteration_tw_p50_us'])} (time-weighted)"
                     + _iterations(latency_us, server))
    if (m.get("waiting_for_cpu_pct") or 0) >= 10:
        parts.append(f"it waited for a CPU {m['waiting_for_cpu_pct']:.0f}% of the time")
    return f"{label}: " + "; ".join(parts) + "."


def _iterations(lat_us: float | None, server: dict) -> str:
    it = server["main_thread"].get("loop_iteration_tw_p50_us")
    if not lat_us or not it:
        return ""
    return f"; the client latency spans {lat_us / it:.1f} loop iterations"


def caveats(cells: list[CellSummary], docs: list[dict], noisy: bool = False) -> list[str]:
    out = []
    for doc in docs:
        emu = (doc.get("emulation") or {}).get("description")
        if emu:
            out.append(f"{doc['label']}: {emu} (emulated slow disk)")
    for cell, doc in zip(cells, docs):
        for op, ll in littles_law(cell).items():
            if ll["ratio"] < 0.8:
                out.append(f"{doc['label']}: {op} TPS x mean latency = {ll['in_flight']:.1f} of {ll['clients']} "
                           "clients in flight: the client side (CPU-bound benchmark client?) limits the run")
            elif ll["ratio"] > 1.2:
                out.append(f"{doc['label']}: {op} TPS x mean latency = {ll['in_flight']:.1f} exceeds "
                           f"{ll['clients']} clients: the recording is inconsistent")
        if cell.server and (cell.server["main_thread"].get("waiting_for_cpu_pct") or 0) >= 20:
            out.append(f"{doc['label']}: the main thread waited for a CPU "
                       f"{cell.server['main_thread']['waiting_for_cpu_pct']:.0f}% of the time (CPU-bound host)")
    if noisy:
        out.append("the change is within the repeat-to-repeat spread (or n < 2): not significant")
    return out


def durability_note(base_doc: dict, cand_doc: dict) -> str | None:
    def acks_after_fsync(doc):
        s = doc.get("server", {})
        if s.get("bio_aof_offload"):
            return True
        return s.get("appendfsync") == "always"
    b, c = acks_after_fsync(base_doc), acks_after_fsync(cand_doc)
    if b == c:
        return None
    loose = cand_doc if b else base_doc
    return (f"durability differs: {loose['label']} (appendfsync={loose.get('server', {}).get('appendfsync')}) "
            "acknowledges SETs before their fsync, the other after (as appendfsync always and #3381's "
            "offload do): SET rows are not comparable for durability")


def explain_compare(base_cells, cand_cells, cmp: Comparison, base_doc: dict, cand_doc: dict) -> list[dict]:
    bmap = {(c.workload, c.value_size): c for c in base_cells}
    cmap = {(c.workload, c.value_size): c for c in cand_cells}
    entries = []
    dur = durability_note(base_doc, cand_doc)
    for row in cmp.rows:
        b, c = bmap[(row.workload, row.value_size)], cmap[(row.workload, row.value_size)]
        if row.op != MEASURED_OP[row.workload]:
            continue
        if not (b.server and c.server):
            entries.append({"workload": row.workload, "op": row.op, "value_size": row.value_size,
                            "metric": "p50_us", "claim": "no server-side trace in one of the recordings "
                            "(--backend none): the client change cannot be attributed",
                            "evidence": {}, "explained_share": 0.0, "caveats": []})
            continue
        bm, cm = b.server["main_thread"], c.server["main_thread"]
        for metric in ("p50_us", "p99_us"):
            bl, cl = row.base.median[metric], row.cand.median[metric]
            if bl is None or cl is None:
                continue
            share = explained_share(bl, cl, bm, cm)
            name = metric.replace("_us", "")
            claim = (f"{row.op} {name} {_ms(bl)} -> {_ms(cl)} ({_pct(100 * (cl - bl) / bl)}). "
                     + _where(f"Baseline ({base_doc['label']})", b.server, bl if metric == "p50_us" else None)
                     + " " + _where(f"Candidate ({cand_doc['label']})", c.server))
            claim += (f" Main-thread AOF blocking accounts for {_ms(attributable_us(bl, bm))} of the baseline "
                      f"{name} and {_ms(attributable_us(cl, cm))} of the candidate's: "
                      f"{share * 100:.0f}% of the change.")
            evidence = {
                "baseline": {"label": base_doc["label"], metric: bl, "main_thread": _evidence_main(bm),
                             "fsync_by_role": fsync_placement(b.server)},
                "candidate": {"label": cand_doc["label"], metric: cl, "main_thread": _evidence_main(cm),
                              "fsync_by_role": fsync_placement(c.server)},
                "attributable_us": {"baseline": attributable_us(bl, bm), "candidate": attributable_us(cl, cm)},
                "model": "attributable = latency x main-thread AOF-blocked fraction",
            }
            cav = caveats([b, c], [base_doc, cand_doc], noisy=row.noise[metric])
            if row.op == "SET" and dur:
                cav.append(dur)
            entries.append({"workload": row.workload, "op": row.op, "value_size": row.value_size, "metric": metric,
                            "claim": claim, "evidence": evidence, "explained_share": round(share, 3),
                            "caveats": cav})
        gc = group_commit_entry(row, b, c, base_doc, cand_doc, dur)
        if gc:
            entries.append(gc)
    return entries


def _evidence_main(m: dict) -> dict:
    keys = ("wall_ms", "fdatasync_count", "fdatasync_p50_us", "fdatasync_p99_us", "on_cpu_pct",
            "blocked_in_fsync_pct", "blocked_in_aof_write_pct", "waiting_for_cpu_pct", "idle_pct",
            "other_blocked_pct", "loop_iterations", "loop_iteration_p50_us", "loop_iteration_tw_p50_us")
    return {k: m.get(k) for k in keys}


def sets_per_fsync(cell: CellSummary) -> float | None:
    """SETs acknowledged per fsync in the window (group commit), from client SET TPS and all
    threads' fsync rate."""
    if not cell.server or "SET" not in cell.ops:
        return None
    tps = cell.ops["SET"].median.get("tps")
    rate = sum(p["per_s"] or 0 for p in fsync_placement(cell.server))
    if not tps or not rate:
        return None
    return tps / rate


def group_commit_entry(row, b: CellSummary, c: CellSummary, base_doc, cand_doc, dur) -> dict | None:
    if "SET" not in b.ops or "SET" not in c.ops:
        return None
    sb, sc = sets_per_fsync(b), sets_per_fsync(c)
    if sb is None and sc is None:
        return None
    tb, tc = b.ops["SET"].median["tps"], c.ops["SET"].median["tps"]
    claim = (f"SET throughput {tb / 1000:.2f}K/s -> {tc / 1000:.2f}K/s; SETs per fsync (group commit) "
             f"{'n/a' if sb is None else f'{sb:.1f}'} -> {'n/a' if sc is None else f'{sc:.1f}'}: "
             "each fsync covers more SETs when the main thread keeps accepting writes during it.")
    if dur:
        claim += " " + dur[0].upper() + dur[1:] + "."
    return {"workload": row.workload, "op": "SET", "value_size": row.value_size, "metric": "sets_per_fsync",
            "claim": claim, "evidence": {"baseline": {"set_tps": tb, "sets_per_fsync": sb},
                                         "candidate": {"set_tps": tc, "sets_per_fsync": sc}},
            "explained_share": None, "caveats": [dur] if dur else []}


def explain_run(cells: list[CellSummary], doc: dict) -> list[dict]:
    """Single recording: where each measured op's latency goes."""
    entries = []
    for cell in cells:
        op = MEASURED_OP.get(cell.workload)
        if not op or op not in cell.ops or not cell.server:
            continue
        o = cell.ops[op]
        m = cell.server["main_thread"]
        for metric in ("p50_us", "p99_us"):
            lat = o.median[metric]
            if lat is None:
                continue
            share = durability_fraction(m)
            name = metric.replace("_us", "")
            claim = (f"{op} {name} {_ms(lat)}. "
                     + _where(doc["label"], cell.server, lat if metric == "p50_us" else None)
                     + f" Main-thread AOF blocking accounts for {_ms(attributable_us(lat, m))} of it.")
            entries.append({"workload": cell.workload, "op": op, "value_size": cell.value_size, "metric": metric,
                            "claim": claim,
                            "evidence": {metric: lat, "main_thread": _evidence_main(m),
                                         "fsync_by_role": fsync_placement(cell.server),
                                         "sets_per_fsync": sets_per_fsync(cell),
                                         "littles_law": littles_law(cell)},
                            "explained_share": round(share, 3),
                            "caveats": caveats([cell], [doc])})
    return entries


def server_view_gap(runs: list[dict], cell: CellSummary) -> dict | None:
    """What the server's own INFO latencystats says against what clients measured."""
    op = MEASURED_OP.get(cell.workload)
    if not op or op not in cell.ops:
        return None
    views = [r.get("server_view", {}).get("latencystats", {}).get(op.lower()) for r in runs]
    views = [v for v in views if v and "p50" in v]
    if not views:
        return None
    server_p50 = sorted(v["p50"] for v in views)[len(views) // 2]
    client_p50 = cell.ops[op].median["p50_us"]
    return {"op": op, "server_p50_us": server_p50, "client_p50_us": client_p50,
            # valkey times a command with a microsecond clock: a sub-µs command is recorded as 1 ns
            "claim": (f"the server's INFO latencystats puts {op} p50 "
                      f"{'under 1 µs' if server_p50 < 1 else f'at {server_p50:.3g} µs'}, clients measured "
                      f"{_ms(client_p50)}: latencystats times command execution only, not the wait for the "
                      "event loop (and the fsync in it) before the command runs and before its reply is written")}
