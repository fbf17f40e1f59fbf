"""What-if from one recording: GET latency and throughput if the AOF fsync left the main thread
(valkey PR #3381's offload), from measured service demands (docs/explain.md).

Operational laws for the closed-loop clients, on what one read-heavy cell measured:
  - the GET-only demand pass (record runs it before each read-heavy cell: no SET, so no AOF write
    and no fsync whatever the policy): GET rate X_d, mean latency L_d, p50/p99 (and, as context
    the prediction does not use, the server's and the client's CPU per GET);
  - the window: the main thread's fsyncs (mean blocked time F), the SET and GET client counts.
Each client cycles through its latency and its own time between requests, Z = N_get / X_d - L_d
(Little's law on the pass). Off the main thread, the fsync no longer stalls the loop: the GET path
runs at the pass's capacity, shared with the SET clients (each request costs the same CPU), so
X_get + X_set = X_d. The SET clients either wait for their fsync (durable acknowledgements, as
#3381 does: X_set = N_set / (F + L + Z)) or not (acknowledged before the fsync, as everysec:
X_set = N_set / (L + Z)). Solving with L = N_get / X_get - Z gives the GET rate and mean latency;
p50 and p99 move by the same amount as the mean from the pass's.
"""
from __future__ import annotations

from valkeytrace.analysis.tables import CellSummary

SCENARIOS = {"fsync_off_main_thread": "the fsync on a background thread, SETs acknowledged after it (PR #3381)",
             "fsync_off_main_thread_early_ack": "the fsync on a background thread, SETs acknowledged before "
                                                "it (as appendfsync everysec)"}


def demand(runs: list[dict]) -> dict | None:
    """The median GET-only demand pass of a cell's runs, with per-request CPU."""
    passes = [r["demand"] for r in runs if (r.get("demand") or {}).get("tps")]
    if not passes:
        return None
    passes.sort(key=lambda d: d["tps"])
    d = dict(passes[len(passes) // 2])
    d["think_us"] = max(0.0, d["clients"] / d["tps"] * 1e6 - d["mean_us"])
    return d


def _cpu_per_request(d: dict, key: str) -> float | None:
    """µs of CPU per GET in the demand pass, from its host_cpu (cores x seconds / requests)."""
    cores = (d.get("host_cpu") or {}).get(key)
    return None if cores is None or not d.get("seconds") else round(cores * d["seconds"] * 1e6 / d["requests"], 2)


def predict(cell: CellSummary, runs: list[dict], scenario: str) -> list[dict]:
    """[{"scenario", "workload", "op", "value_size", "metric", "predicted", "inputs"}] or []."""
    if cell.workload != "read-heavy" or not cell.server or "GET" not in cell.ops:
        return []
    m = cell.server["main_thread"]
    n_f = (m.get("fdatasync_count") or 0) + (m.get("fsync_count") or 0)
    d = demand(runs)
    if not n_f or d is None:
        return []
    fsync_us = m["wall_ms"] * 1000 * (m.get("blocked_in_fsync_pct") or 0) / 100 / n_f
    n_get = cell.ops["GET"].clients or d["clients"]
    n_set = cell.ops["SET"].clients if "SET" in cell.ops else 0
    x_d, z = d["tps"], d["think_us"]
    wait = fsync_us if scenario == "fsync_off_main_thread" else 0.0
    x_get = x_d * n_get / (n_get + n_set)  # start: every client alike
    for _ in range(100):
        lat = n_get / x_get * 1e6 - z
        x_set = n_set / ((wait + lat + z) / 1e6) if n_set else 0.0
        x_new = max(x_d - x_set, x_d * 0.01)
        if abs(x_new - x_get) < 1e-6 * x_d:
            break
        x_get = 0.5 * x_get + 0.5 * x_new
    lat = n_get / x_get * 1e6 - z
    shift = lat - d["mean_us"]
    inputs = {"get_clients": n_get, "set_clients": n_set, "demand_get_tps": x_d, "demand_mean_us": d["mean_us"],
              "demand_p50_us": d["p50_us"], "demand_p99_us": d["p99_us"],
              "client_time_between_requests_us": round(z, 1), "sets_wait_for_fsync": bool(wait),
              **({"main_fsync_mean_blocked_us": round(fsync_us, 1)} if wait else {}),
              "predicted_set_tps": round(x_set, 1),
              # context, not used by the laws above (each request is taken to cost the same)
              "context": {"server_cpu_us_per_get": _cpu_per_request(d, "server_cores"),
                          "client_cpu_us_per_get": _cpu_per_request(d, "clients_cores")}}
    base = {"scenario": scenario, "workload": cell.workload, "op": "GET", "value_size": cell.value_size}
    return [{**base, "metric": "tps", "predicted": round(x_get, 1), "inputs": inputs},
            {**base, "metric": "p50_us", "predicted": round(d["p50_us"] + shift, 1), "inputs": inputs},
            {**base, "metric": "p99_us", "predicted": round(d["p99_us"] + shift, 1), "inputs": inputs}]


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
        out.append({**w, "measured": measured, "error_pct": err})
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
        out.append(f"{workload} {size} B, {SCENARIOS[scenario]}: GET {g['tps']['predicted'] / 1000:.1f}K/s, "
                   f"p50 {_us(g['p50_us']['predicted'])}, p99 {_us(g['p99_us']['predicted'])} "
                   f"(inputs: GET-only pass {i['demand_get_tps'] / 1000:.1f}K/s, mean {_us(i['demand_mean_us'])}; "
                   f"client time between requests {_us(i['client_time_between_requests_us'])}; "
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
                   f"{fmt(w['predicted'])} from the baseline alone, measured {fmt(w['measured'])} "
                   f"({w['error_pct']:+.0f}%)")
    return out
