"""The JSON report (format "valkeytrace-report", version 2; documented in docs/report-json.md)."""
from __future__ import annotations

import json

import msgspec

from valkeytrace.analysis.tables import METRICS, OPEN_METRICS
from valkeytrace.analysis.report import ReportInput
from valkeytrace.reporters.sentences import warning_text
from valkeytrace.reporters.claims import entry_json, gap_json, say
from valkeytrace.reporters.trade_words import trade_line

REPORT_VERSION = 2  # 2: runs[].warnings are {code, figures, text}


def _op(o) -> dict:
    d = {m: o.median[m] for m in METRICS}
    d["mean_us"] = o.median.mean_us
    if o.median.offered_rate:  # open loop: the percentiles above are from each request's due moment
        d.update({m: o.median[m] for m in OPEN_METRICS}, saturated=o.saturated)
    d.update({"clients": o.clients, "role": o.role, "n": o.n,
              "spread": {m: o.spread[m] for m in METRICS}})
    return d


def _warnings(notes: list) -> list[dict]:
    """Each distinct warning once: its code, its figures and the sentence the other reports print."""
    out: dict[str, dict] = {}
    for n in notes:
        text = warning_text(n)
        out.setdefault(text, {"code": n.code, "figures": msgspec.to_builtins(n.figures), "text": text})
    return list(out.values())


def build(inp: ReportInput) -> dict:
    runs = []
    for r in inp.runs:
        s = r.server
        cells = [{"workload": c.workload, "value_size": c.value_size, "load": c.load, "repeats": c.repeats,
                  "failed": c.failed, "ops": {op: _op(o) for op, o in c.ops.items()},
                  **({"server": c.server.to_json()} if c.server is not None else {}),
                  **({"replicas": [x.to_json() for x in c.replicas]} if c.replicas else {}),
                  **({"shards": [x.to_json(_op) for x in c.shards]} if c.shards else {}),
                  **({"config_fsync": c.config_fsync.to_json()} if c.config_fsync is not None else {}),
                  **({"replication": c.replication.to_json()} if c.replication is not None else {}),
                  **({"server_view": gap_json(r.server_views[c.key])} if c.key in r.server_views else {}),
                  **({"memory": r.memory[c.key].to_json()} if c.key in r.memory else {}),
                  **({"tracer_cost": r.tracer_cost[c.key].to_json()} if c.key in r.tracer_cost else {})}
                 for c in r.cells]
        # the report's own keys (docs/report-json.md), not the recording's
        runs.append(dict(
            label=r.label, recording=r.path, complete=r.complete,
            server={"version": s.version, "appendfsync": s.appendfsync, "io_threads": s.io_threads,
                    "bio_aof_offload": s.bio_aof_offload, "mode": s.mode},
            client=msgspec.to_builtins(r.client), settings=msgspec.to_builtins(r.settings), warnings=_warnings(r.warnings),
            emulation=r.emulation_spec, overhead=msgspec.to_builtins(r.overhead),
            **({"nodes": msgspec.to_builtins(r.nodes)} if r.nodes else {}),
            **({"cluster": msgspec.to_builtins(r.cluster)} if r.cluster is not None else {}),
            **({"failover": msgspec.to_builtins(r.failover)} if r.failover is not None else {}),
            server_exits=[e.to_json() for e in r.server_exits],
            **({"durability_check": msgspec.to_builtins(r.durability_check)} if r.durability_check is not None else {}),
            **({"tracer": r.tracer} if r.tracer is not None else {}),
            cells=cells, explanation=[entry_json(e) for e in r.explanation], sensitivity=[x.to_json() for x in r.sensitivity]))
    out = {"format": "valkeytrace-report", "version": REPORT_VERSION, "runs": runs,
           **({"curves": [c.to_json() for c in inp.curves]} if inp.curves else {})}
    if inp.comparison is not None:
        out["compare"] = {
            "baseline": inp.baseline.label,
            "candidate": inp.candidate.label,
            "rows": [{"workload": row.workload, "op": row.op, "value_size": row.value_size, "rate": row.rate,
                      **{f"{m.removesuffix('_us')}_delta_pct": row.deltas[m] for m in METRICS},
                      "within_noise": {m: row.noise[m] for m in METRICS},
                      "significant": {m: row.significant[m] for m in METRICS},
                      "n": {"baseline": row.base.n, "candidate": row.cand.n}}
                     for row in inp.comparison.rows],
            "verdict": [v.as_json(say(v.rule), say(v.note) if v.note else None) for v in inp.verdict or []],
            "missing": inp.comparison.missing,
            "explanation": [entry_json(e) for e in inp.explanation or []],
            "whatif": [w.to_json() for w in inp.whatif or []],
            "trades": [{**t.to_json(), "line": trade_line(t)[0][1]} for t in inp.trades or []],
        }
    return out


def render(inp: ReportInput, out) -> None:
    json.dump(build(inp), out, indent=2, allow_nan=False)
    out.write("\n")
