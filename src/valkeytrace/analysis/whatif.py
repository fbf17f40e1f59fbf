"""What-if from one recording: GET latency and throughput if the AOF fsync left the main thread
(valkey PR #3381's offload), from two passes measured without any fsync (docs/explain.md).

Before each read-heavy cell, record runs two short GET passes (workload/scenarios.py), neither
of which writes the AOF, so neither fsyncs whatever the policy:
  A. GET alone (the measured clients, N_get of them): rate, mean, p50, p99;
  B. the same, with the background clients (N_set) running too, but reading: the cell's client
     population and the CPU it takes on this host.
Off the main thread, the fsync no longer stalls the loop, and what is left is one of these two
passes or a mix of them, depending on how much load the background clients still put on the
host:
  - SETs acknowledged before their fsync (as everysec): the background clients never wait, they
    load the host as they do in B: the prediction is B;
  - SETs acknowledged after it (durable, as #3381 does): each background client waits the
    fsync F (the main thread's, measured in the window) on top of its own cycle in B, so it
    runs at X_set = N_set / (F + N_set / X_bg), a share u = X_set / X_bg of B's background load;
    GET rate, p50 and p99 are taken as A + u (B - A) (linear in the background load).
What it leaves out: the SET's own execution and the AOF write() each loop iteration still does
(a GET stands in for each SET), and how a shorter background cycle would raise X_set.

Recordings made before the loaded pass existed (no demand.loaded) get the older model: operational
laws with each client's own time between requests Z = N_get / X_A - L_A taken as a constant;
it under-predicts the latency (on this VM Z halves when the background clients run, which is why
pass B exists).
"""
from __future__ import annotations

from valkeytrace.analysis.tables import CellSummary
from valkeytrace.analysis.verdict import WHATIF_TOLERANCE_PCT, whatif_verdict

SCENARIOS = {"fsync_off_main_thread": "the fsync on a background thread, SETs acknowledged after it (PR #3381)",
             "fsync_off_main_thread_early_ack": "the fsync on a background thread, SETs acknowledged before "
                                                "it (as appendfsync everysec)"}


def _median_by_tps(passes: list[dict]) -> dict | None:
    passes = sorted((p for p in passes if p and p.get("tps")), key=lambda p: p["tps"])
    return dict(passes[len(passes) // 2]) if passes else None


def demand(runs: list[dict]) -> dict | None:
    """The median GET-only pass (A) of a cell's runs, with the median loaded pass (B) as
    `loaded` when the runs have one."""
    d = _median_by_tps([r.get("demand") for r in runs])
    if d is None:
        return None
    loaded = _median_by_tps([(r.get("demand") or {}).get("loaded") for r in runs])
    d["loaded"] = loaded if loaded and (loaded.get("background") or {}).get("tps") else None
    return d


def _cpu_per_request(d: dict, key: str) -> float | None:
    """µs of CPU per GET in the demand pass, from its host_cpu (cores x seconds / requests)."""
    cores = (d.get("host_cpu") or {}).get(key)
    return None if cores is None or not d.get("seconds") else round(cores * d["seconds"] * 1e6 / d["requests"], 2)


def _from_passes(d: dict, n_set: int, wait_us: float) -> tuple[dict, dict]:
    """Predicted {tps, p50_us, p99_us} between pass A and pass B, and the inputs used."""
    b = d["loaded"]
    bg_tps = b["background"]["tps"]
    bg_n = b["background"]["clients"] or n_set
    if wait_us:
        x_set = bg_n / ((wait_us + bg_n / bg_tps * 1e6) / 1e6)
        u = min(1.0, x_set / bg_tps)
    else:
        u = 1.0
    pred = {k: d[k] + u * (b[k] - d[k]) for k in ("tps", "p50_us", "p99_us")}
    inputs = {"model": "get_passes", "demand_get_tps": d["tps"], "demand_p50_us": d["p50_us"],
              "demand_p99_us": d["p99_us"], "loaded_get_tps": b["tps"], "loaded_p50_us": b["p50_us"],
              "loaded_p99_us": b["p99_us"], "loaded_background_clients": bg_n,
              "loaded_background_tps": round(bg_tps, 1), "background_load_share": round(u, 3),
              "predicted_set_tps": round(u * bg_tps, 1)}
    return pred, inputs


def _from_laws(d: dict, n_get: int, n_set: int, wait_us: float) -> tuple[dict, dict]:
    """The older model, for recordings without pass B: operational laws on pass A with the
    clients' time between requests Z held constant."""
    x_d = d["tps"]
    z = max(0.0, d["clients"] / x_d * 1e6 - d["mean_us"])  # Little's law on pass A
    x_get = x_d * n_get / (n_get + n_set)  # start: every client alike
    for _ in range(100):
        lat = n_get / x_get * 1e6 - z
        x_set = n_set / ((wait_us + lat + z) / 1e6) if n_set else 0.0
        x_new = max(x_d - x_set, x_d * 0.01)
        if abs(x_new - x_get) < 1e-6 * x_d:
            break
        x_get = 0.5 * x_get + 0.5 * x_new
    shift = n_get / x_get * 1e6 - z - d["mean_us"]
    pred = {"tps": x_get, "p50_us": d["p50_us"] + shift, "p99_us": d["p99_us"] + shift}
    inputs = {"model": "constant_client_time", "demand_get_tps": x_d, "demand_mean_us": d["mean_us"],
              "demand_p50_us": d["p50_us"], "demand_p99_us": d["p99_us"],
              "client_time_between_requests_us": round(z, 1), "predicted_set_tps": round(x_set, 1)}
    return pred, inputs


def predict_set(cell: CellSummary, scenario: str) -> list[dict]:
    """Write-only SET under a durable offload (#3381), from the baseline alone: the fsync leaves the
    main thread but each SET is still acknowledged after its batch's fdatasync, so a SET waits k
    jobs of J, J the main thread's fsync (and AOF write) per cycle, k the fsync cycles a SET
    waits on the baseline (its p50 in cycles, rounded: the clients answer in the same cohorts
    whichever thread fsyncs); SET TPS = clients / (k x J) (Little's law). Nothing for early-ack
    (a SET there waits no fsync: its latency is the loop's, which the baseline does not show)."""
    if scenario != "fsync_off_main_thread" or cell.workload != "write-only" or not cell.server or "SET" not in cell.ops:
        return []
    from valkeytrace.analysis import model

    m = cell.server.main_thread
    n_f = (m.fdatasync_count or 0) + (m.fsync_count or 0)
    o = cell.ops["SET"]
    cyc = model.loop_cycle(cell.server)
    if not n_f or cyc["unit"] != "fsync cycle" or not cyc["duration_us"] or not o.get("p50_us") or not o.clients:
        return []
    wall_us = m.wall_ms * 1000
    job_us = wall_us * ((m.blocked_in_fsync_pct or 0) + (m.blocked_in_aof_write_pct or 0)) / 100 / n_f
    if job_us <= 0:
        return []
    k = max(1, round(o.get("p50_us") / cyc["duration_us"]))
    inputs = {"model": "jobs_per_set", "jobs_per_set": k, "job_us": round(job_us, 1),
              "baseline_set_p50_cycles": round(o.get("p50_us") / cyc["duration_us"], 2),
              "fsync_cycle_us": round(cyc["duration_us"], 1), "write_clients": o.clients, "sets_wait_for_fsync": True}
    base = {"scenario": scenario, "workload": cell.workload, "op": "SET", "value_size": cell.value_size}
    return [{**base, "metric": "p50_us", "predicted": round(k * job_us, 1), "inputs": inputs},
            {**base, "metric": "tps", "predicted": round(o.clients / (k * job_us) * 1e6, 1), "inputs": inputs}]


def predict_gather(cell: CellSummary, gather_ns: int) -> list[dict]:
    """Write-only SET under the durable offload with a gather window W (record --offload-gather),
    from the baseline alone (its durability record: a job J, a cohort's arrival spread S, the
    clients' turnaround D after a release). With W >= S every client's write rides one job (one
    cohort): the job starts W after the first write, so a SET waits from its arrival, on average
    S/2 after the first, to the job's end: p50 = W + J - S/2; one round trip of the whole
    population takes D + W + J: TPS = clients / (D + W + J). The window counts from the later of a
    job's first write and the previous job's end (csrc/offload.c), so the clients a job released
    rejoin the next one as long as W >= D + S: the smallest window that keeps one cohort. Below it
    the cohorts stay as on the baseline (k of them, each job W longer)."""
    d = cell.server.durability if cell.server and cell.workload == "write-only" else None
    if not d or "SET" not in cell.ops or not d.job_ms_p50 or d.arrival_spread_us is None:
        return []
    w, j, spread = gather_ns / 1e3, d.job_ms_p50 * 1e3, d.arrival_spread_us
    delay, clients = d.arrival_delay_us or 0.0, cell.ops["SET"].clients or d.write_clients
    if not clients:
        return []
    if w >= delay + spread:
        cohorts, p50, cycle = 1, w + j - spread / 2, delay + w + j
    else:
        cohorts = d.cohorts or 1
        p50, cycle = cohorts * (w + j), cohorts * (w + j)
    inputs = {"model": "gather_window", "window_us": round(w, 1), "job_us": round(j, 1),
              "arrival_spread_us": round(spread, 1), "arrival_delay_us": round(delay, 1), "cohorts": cohorts,
              "smallest_one_cohort_window_us": round(delay + spread, 1), "write_clients": clients, "sets_wait_for_fsync": True}
    base = {"scenario": "fsync_off_main_thread", "workload": cell.workload, "op": "SET", "value_size": cell.value_size}
    return [{**base, "metric": "p50_us", "predicted": round(p50, 1), "inputs": inputs},
            {**base, "metric": "tps", "predicted": round(clients / cycle * 1e6, 1), "inputs": inputs}]


def with_gather(base_whatif: list[dict], base_cells: list[CellSummary], gather_ns: int) -> list[dict]:
    """The baseline's predictions for a candidate with a gather window: its SET rows are the
    window's (predict_gather), the rest unchanged."""
    if not gather_ns:
        return base_whatif
    gathered = [e for c in base_cells for e in predict_gather(c, gather_ns)]
    cells = {(e["workload"], e["value_size"]) for e in gathered}
    keep = [e for e in base_whatif if not (e["op"] == "SET" and (e["workload"], e["value_size"]) in cells)]
    return keep + gathered


def predict(cell: CellSummary, runs: list[dict], scenario: str) -> list[dict]:
    """[{"scenario", "workload", "op", "value_size", "metric", "predicted", "inputs"}] or []."""
    if cell.workload == "write-only":
        return predict_set(cell, scenario)
    if cell.workload != "read-heavy" or not cell.server or "GET" not in cell.ops:
        return []
    m = cell.server.main_thread
    n_f = (m.fdatasync_count or 0) + (m.fsync_count or 0)
    d = demand(runs)
    if not n_f or d is None:
        return []
    fsync_us = m.wall_ms * 1000 * (m.blocked_in_fsync_pct or 0) / 100 / n_f
    n_get = cell.ops["GET"].clients or d["clients"]
    n_set = cell.ops["SET"].clients if "SET" in cell.ops else 0
    wait = fsync_us if scenario == "fsync_off_main_thread" else 0.0
    pred, used = _from_passes(d, n_set, wait) if d["loaded"] else _from_laws(d, n_get, n_set, wait)
    inputs = {"get_clients": n_get, "set_clients": n_set, **used, "sets_wait_for_fsync": bool(wait),
              **({"main_fsync_mean_blocked_us": round(fsync_us, 1)} if wait else {}),
              # context, not used by the models (their passes measure it whole)
              "context": {"server_cpu_us_per_get": _cpu_per_request(d, "server_cores"),
                          "client_cpu_us_per_get": _cpu_per_request(d, "clients_cores")}}
    base = {"scenario": scenario, "workload": cell.workload, "op": "GET", "value_size": cell.value_size}
    return [{**base, "metric": metric, "predicted": round(pred[metric], 1), "inputs": inputs}
            for metric in ("tps", "p50_us", "p99_us")]


def predict_run(cells: list[CellSummary], doc: dict) -> list[dict]:
    out = []
    for cell in cells:
        runs = [r for r in doc.get("runs", []) if r["workload"] == cell.workload and r["value_size"] == cell.value_size
                and r.get("status") == "ok" and not r.get("fsync_extra_delay_ns")]
        for scenario in SCENARIOS:
            out += predict(cell, runs, scenario)
    return out


def check(base_whatif: list[dict], cand_cells: list[CellSummary], scenario: str) -> list[dict]:
    """The baseline's predictions for `scenario` against the candidate's measurements."""
    cmap = {(c.workload, c.value_size): c for c in cand_cells}
    out = []
    for w in base_whatif:
        c = cmap.get((w["workload"], w["value_size"]))
        if w["scenario"] != scenario or c is None or w["op"] not in c.ops:
            continue
        measured = c.ops[w["op"]].get(w["metric"])
        err = None if not measured else round(100.0 * (w["predicted"] - measured) / measured, 1)
        out.append({**w, "measured": measured, "error_pct": err, "tolerance_pct": WHATIF_TOLERANCE_PCT,
                    "verdict": whatif_verdict(err)})
    return out


def _us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def describe(entries: list[dict]) -> list[str]:
    """One sentence per cell and scenario, with the inputs used."""
    out = []
    groups: dict[tuple, dict] = {}
    for e in entries:
        groups.setdefault((e["workload"], e["value_size"], e["scenario"]), {})[e["metric"]] = e
    for (workload, size, scenario), g in groups.items():
        i = g["tps"]["inputs"]
        if i.get("model") == "gather_window":
            out.append(f"{workload} {size} B, the durable offload with a {_us(i['window_us'])} gather window: SET "
                       f"{g['tps']['predicted'] / 1000:.1f}K/s, p50 {_us(g['p50_us']['predicted'])} (inputs: a job "
                       f"{_us(i['job_us'])}, a cohort's arrival spread {_us(i['arrival_spread_us'])}, clients back "
                       f"{_us(i['arrival_delay_us'])} after a release: {i['cohorts']} cohort(s); one cohort from a "
                       f"{_us(i['smallest_one_cohort_window_us'])} window on)")
            continue
        if i.get("model") == "jobs_per_set":
            out.append(f"{workload} {size} B, {SCENARIOS[scenario]}: SET {g['tps']['predicted'] / 1000:.1f}K/s, "
                       f"p50 {_us(g['p50_us']['predicted'])} (inputs: each SET waits {i['jobs_per_set']} job(s) "
                       f"of {_us(i['job_us'])}, as it waits {i['baseline_set_p50_cycles']:.2f} fsync cycles of "
                       f"{_us(i['fsync_cycle_us'])} here; {i['write_clients']} SET clients)")
            continue
        if i.get("model") == "get_passes":
            used = (f"GET alone {i['demand_get_tps'] / 1000:.1f}K/s, p50 {_us(i['demand_p50_us'])}; with "
                    f"{i['loaded_background_clients']} background clients reading "
                    f"{i['loaded_get_tps'] / 1000:.1f}K/s, p50 {_us(i['loaded_p50_us'])}; "
                    f"{i['background_load_share']:.0%} of that background load")
        else:
            used = (f"GET-only pass {i['demand_get_tps'] / 1000:.1f}K/s, mean {_us(i['demand_mean_us'])}; "
                    f"client time between requests {_us(i['client_time_between_requests_us'])} held constant")
        out.append(f"{workload} {size} B, {SCENARIOS[scenario]}: GET {g['tps']['predicted'] / 1000:.1f}K/s, "
                   f"p50 {_us(g['p50_us']['predicted'])}, p99 {_us(g['p99_us']['predicted'])} "
                   f"(inputs: {used}; "
                   + (f"main-thread fsync {_us(i['main_fsync_mean_blocked_us'])}; " if i["sets_wait_for_fsync"] else "")
                   + f"{i['get_clients']} GET + {i['set_clients']} SET clients, SETs at "
                   f"{i['predicted_set_tps'] / 1000:.1f}K/s)")
    return out


def describe_check(checked: list[dict]) -> list[str]:
    names = {"tps": "TPS", "p50_us": "p50", "p99_us": "p99"}
    out = []
    for w in checked:
        if w["measured"] is None:
            continue
        fmt = (lambda v: f"{v / 1000:.1f}K/s") if w["metric"] == "tps" else _us
        out.append(f"{w['workload']} {w['value_size']} B {w['op']} {names[w['metric']]}: predicted "
                   f"{fmt(w['predicted'])} from the baseline alone, measured {fmt(w['measured'])}: "
                   f"{w['verdict']} {w['tolerance_pct']:.0f}% ({w['error_pct']:+.0f}%)")
    return out
