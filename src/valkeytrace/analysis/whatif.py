"""The compare report's what-if: the candidate's tables predicted from the baseline alone, by the
pipeline model (analysis/predict.py, calibrated on the baseline's recording), against what the
candidate measured. One code path with `valkeytrace predict`: the candidate's configuration is read
as a Change of the baseline's (its offload, gather window, fsync delay, client counts), and nothing is
predicted where the two differ in what the model does not cover (another build, other I/O threads).

Each entry: {"scenario", "workload", "op", "value_size", "metric", "predicted", "measured", "error_pct",
"tolerance_pct", "verdict", "inputs"}; a metric is "within" when the prediction lies within its
tolerance of the measurement (TOLERANCE_PCT: p50 and TPS 15%, p99 40%), and only then is it stated
as predicted.
"""
from __future__ import annotations

from valkeytrace.analysis.calibration import CalibrationError, calibrate
from valkeytrace.analysis.predict import Change, apply, inputs_for, run
from valkeytrace.analysis.tables import MEASURED_OP, CellSummary

TOLERANCE_PCT = {"tps": 15.0, "p50_us": 15.0, "p95_us": 40.0, "p99_us": 40.0}
METRICS = tuple(TOLERANCE_PCT)
EVERYSEC_INTERVAL_US = 1e6  # appendfsync everysec: a background fdatasync at most once a second


def _offload(doc: dict) -> tuple[str, float | None]:
    """Who makes writes durable in a recording, as a Change's offload: none, durable, early-ack."""
    emu = (doc.get("emulation") or {}).get("offload") or {}
    server = doc.get("server") or {}
    if emu.get("mode"):
        return emu["mode"], None
    if server.get("bio_aof_offload"):
        return "durable", None
    if server.get("appendfsync") == "everysec":
        return "early-ack", EVERYSEC_INTERVAL_US
    return "none", None


def change_between(base: dict, cand: dict) -> tuple[Change | None, str]:
    """(the Change that makes the baseline's configuration the candidate's, its scenario) or (None, why
    nothing is predicted)."""
    bs, cs = base.get("server") or {}, cand.get("server") or {}
    if (bs.get("version"), bs.get("binary")) != (cs.get("version"), cs.get("binary")) and bs.get("binary"):
        return None, "the candidate runs another build: the model changes settings, not code"
    if (bs.get("io_threads") or 1) != (cs.get("io_threads") or 1):
        return None, "the sides run different I/O threads: outside what the model changes"
    if bs.get("appendfsync") not in (None, "always"):
        return None, f"the baseline runs appendfsync {bs.get('appendfsync')}: the model is calibrated on always"
    b_mode, _ = _offload(base)
    c_mode, interval = _offload(cand)
    kw: dict = {}
    if c_mode != b_mode:
        kw["offload"] = c_mode
    if interval:
        kw["job_interval_us"] = interval
    if c_mode != b_mode and c_mode != "none" and not ((cand.get("emulation") or {}).get("offload") or {}).get("mode"):
        kw["emulated"] = False  # a real offload (#3381's, or everysec's bio_aof): no emulation to pay for
    bg = (((base.get("emulation") or {}).get("offload") or {}).get("gather_ns") or 0)
    cg = (((cand.get("emulation") or {}).get("offload") or {}).get("gather_ns") or 0)
    if cg != bg:
        kw["gather_us"] = cg / 1e3
    bd = (base.get("emulation") or {}).get("fsync_delay") or {}
    cd = (cand.get("emulation") or {}).get("fsync_delay") or {}
    if (bd.get("median_ns"), bd.get("sigma")) != (cd.get("median_ns"), cd.get("sigma")):
        kw["fsync_delay"] = cd
    b_set, c_set = base.get("settings") or {}, cand.get("settings") or {}
    for k in ("get_clients", "set_clients", "write_clients"):
        if c_set.get(k) is not None and c_set.get(k) != b_set.get(k):
            kw[k] = c_set[k]
    if not kw:
        return None, "the candidate's configuration is the baseline's, as far as the model sees: nothing to predict"
    return Change(**kw), scenario_name(kw)


def scenario_name(kw: dict) -> str:
    parts = []
    if "offload" in kw:
        parts.append({"none": "fsync_on_main_thread", "durable": "fsync_off_main_thread",
                      "early-ack": "fsync_off_main_thread_early_ack"}[kw["offload"]])
    if kw.get("gather_us"):
        parts.append("gather_window")
    if "fsync_delay" in kw:
        parts.append("fsync_delay")
    if any(k.endswith("_clients") for k in kw):
        parts.append("clients")
    return "+".join(parts)


def check(base_doc: dict, cand_doc: dict, cand_cells: list[CellSummary]) -> list[dict]:
    """The baseline's prediction of each measured op of the candidate's cells, against the candidate."""
    change, scenario = change_between(base_doc, cand_doc)
    if change is None:
        return []
    out = []
    for cell in cand_cells:
        op = MEASURED_OP.get(cell.workload)
        if op not in cell.ops:
            continue
        try:
            cal = calibrate(base_doc, cell.workload, cell.value_size, cell.rate)
        except CalibrationError:
            continue
        ops, server, _ = run(apply(cal, change))
        inputs = {"model": "pipeline", "change": change.describe(), "calibration": inputs_for(cal, change),
                  "fitted": cal.fitted,
                  "predicted_server": server, "get_clients": (ops.get("GET") or {}).get("clients")}
        for metric in METRICS:
            measured = cell.ops[op].get(metric)
            predicted = (ops.get(op) or {}).get(metric)
            if predicted is None:
                continue
            err = None if not measured else round(100.0 * (predicted - measured) / measured, 1)
            tol = TOLERANCE_PCT[metric]
            out.append({"scenario": scenario, "workload": cell.workload, "op": op, "value_size": cell.value_size,
                        "rate": cell.rate, "metric": metric, "predicted": predicted, "measured": measured, "error_pct": err,
                        "tolerance_pct": tol,
                        "verdict": None if err is None else ("within" if abs(err) <= tol else "outside"),
                        "inputs": inputs})
    return out


def predicted_ops(checked: list[dict]) -> dict:
    """{(workload, value_size, op, rate): {metric: predicted, "errors": {metric: error_pct}}}: the rows a
    compare table shows beside the candidate's."""
    out: dict = {}
    for w in checked:
        row = out.setdefault((w["workload"], w["value_size"], w["op"], w.get("rate")), {"errors": {}})
        row[w["metric"]] = w["predicted"]
        if w["error_pct"] is not None:
            row["errors"][w["metric"]] = w["error_pct"]
    return out


def _us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def describe_check(checked: list[dict]) -> list[str]:
    """One line per cell: each metric predicted from the baseline alone against the measurement."""
    names = {"tps": "TPS", "p50_us": "p50", "p95_us": "p95", "p99_us": "p99"}
    groups: dict = {}
    for w in checked:
        groups.setdefault((w["workload"], w["value_size"], w["op"], w.get("rate")), []).append(w)
    out = []
    for (workload, size, op, rate), ws in groups.items():
        parts = []
        for w in ws:
            if w["measured"] is None:
                continue
            fmt = (lambda v: f"{v / 1000:.1f}K/s") if w["metric"] == "tps" else _us
            parts.append(f"{names[w['metric']]} predicted {fmt(w['predicted'])}, measured {fmt(w['measured'])} "
                         f"({w['error_pct']:+.0f}%: {w['verdict']} {w['tolerance_pct']:.0f}%)")
        if parts:
            at = f" at {rate:,.0f}/s" if rate else ""
            out.append(f"{workload} {size} B {op}{at}: " + "; ".join(parts))
    return out
