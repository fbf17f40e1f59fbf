"""A prediction (analysis/predict.py) as text, markdown or JSON: the seed's columns, the recording's
measured row, the predicted row and the change between them, then what the model stands on."""
from __future__ import annotations

import json
from dataclasses import dataclass

from valkeytrace import workloads
from valkeytrace.analysis.calibration import Measured
from valkeytrace.analysis.calls import NO_FSYNC_INTERVAL_US
from valkeytrace.analysis.predict import LEVEL, Prediction
from valkeytrace.recording.model import FsyncDelay, decode_as
from valkeytrace.reporters.base import fmt_ktps, fmt_mbs, fmt_pct, fmt_us
from valkeytrace.reporters.facts_words import fmt_time

COLUMNS = ("Value", "Op", "TPS (K req/s)", "MB/s", "P50 (µs)", "P95 (µs)", "P99 (µs)", "Notes")


def _change_words(p: Prediction) -> str:
    c = p.change
    words = []
    if c.job_interval_us:
        words.append("appendfsync no" if c.job_interval_us >= NO_FSYNC_INTERVAL_US else "appendfsync everysec")
    elif c.offload is not None:
        words.append("fsync back on the main thread" if c.offload == "none" else f"the {c.offload} offload")
    if c.io_threads is not None:
        words.append(f"io-threads {c.io_threads}")
    if c.gather_us is not None:
        words.append(f"a {c.gather_us / 1000:g} ms gather window")
    if c.design is not None:
        words.append(f"the offload's design {c.design}")
    if c.fsync_delay is not None:
        d = decode_as(c.fsync_delay or {}, FsyncDelay)
        words.append(f"+{(d.median_ns or 0) / 1e6:g} ms per fdatasync instead of the recording's")
        if d.stall_ns:
            words.append(f"one fdatasync {d.stall_ns / 1e9:g} s longer in every {(d.stall_period_ns or 0) / 1e9:g} s")
    for k in ("get_clients", "set_clients", "write_clients"):
        if getattr(c, k) is not None:
            words.append(f"{k.replace('_', ' ')} {getattr(c, k)}")
    if c.rate:
        words.append(f"{c.rate:,.0f} requests/s offered")
    return ", ".join(words) or "nothing changed (the recording as recorded)"


@dataclass
class PredictionTable:
    title: str
    columns: tuple
    rows: list


def tables(p: Prediction) -> list[PredictionTable]:
    """Per workload, for each cell: measured, predicted, delta."""
    out = []
    for w in workloads.TABLED:
        cells = [c for c in p.cells if c.workload == w.name]
        op = workloads.MEASURED_OP[w.name]
        rows = []
        for c in cells:
            m, q = c.baseline.get(op) or Measured(), c.ops.get(op)
            size = f"{c.value_size} B" + (f" @ {c.rate:,.0f}/s" if c.rate else "")
            loop = "" if c.rate == c.recorded_rate else (
                ", closed loop" if c.recorded_rate is None else f", at {c.recorded_rate:,.0f}/s")
            rows.append([f"{p.label} (measured{loop})", f"{c.value_size} B", op, *_figures(m, c.value_size), ""])
            rows.append(["predicted", size, op, *_figures(q, c.value_size, ranged=True), _note(c, op)])
            rows.append(["delta", size, op] + [
                fmt_pct(_delta(getattr(m, k), getattr(q, k) if q else None))
                for k in ("tps", "tps", "p50_us", "p95_us", "p99_us")] + [""])
        if rows:
            out.append(PredictionTable(w.title or w.name, COLUMNS, rows))
    return out


def _figures(f, size: int, ranged: bool = False) -> list[str]:
    """The seed's five figures; with ranged, each predicted one with its interval: `5,140 [4,710, 5,600]`."""
    if f is None:
        return ["n/a"] * 5
    iv = (f.interval or {}) if ranged else {}

    def r(fmt, k):
        lo_hi = iv.get(k)
        return fmt(getattr(f, k)) + (f" [{fmt(lo_hi[0])}, {fmt(lo_hi[1])}]" if lo_hi else "")
    return [r(fmt_ktps, "tps"), fmt_mbs((f.tps or 0) * size / 1e6), r(fmt_us, "p50_us"), r(fmt_us, "p95_us"),
            r(fmt_us, "p99_us")]


def _delta(a, b):
    return None if not a or b is None else 100.0 * (b - a) / a


def _note(c, op: str) -> str:
    s = c.server
    parts = []
    q = c.ops.get(op)
    if q is not None and q.offered_rate:
        parts.append(("SATURATED: " if q.saturated else "") + f"offered {q.offered_rate / 1000:.1f}K/s, "
                     f"achieved {(q.achieved_rate or 0) / 1000:.1f}K/s, service p50 {fmt_us(q.service_p50_us)} µs")
    if s.writes_per_sync:
        parts.append(f"{s.syncs_per_s or 0:.0f} fdatasync/s, {s.writes_per_sync:.1f} writes each")
    held = c.memory.get("held_replies_peak") if c.memory else None
    if held:
        parts.append(f"at its peak the offload holds {held:,} replies ({c.memory['held_bytes_peak']:,} B of "
                     "output buffers) until durable")
    if q is not None and q.interval:
        parts.append(f"[{LEVEL:.0%} range of one recording of the baseline's shape]")
    own, m = c.self_check.get(op), c.baseline.get(op)
    if own is not None and m is not None and own.p50_us and m.p50_us:
        parts.append(f"as recorded the model gives p50 {_delta(m.p50_us, own.p50_us):+.0f}%")
    return "; ".join(parts)


def _inputs_lines(p: Prediction) -> list[str]:
    out, seen = [], set()
    for c in p.cells:
        if (c.workload, c.value_size) in seen:  # one calibration a cell, whatever the rates predicted
            continue
        seen.add((c.workload, c.value_size))
        out.append(f"{c.workload} {c.value_size} B ({len(c.fitted)} fitted: {', '.join(c.fitted) or 'none'}):")
        for name, v in c.inputs.items():
            fitted = " (fitted)" if name in c.fitted else ""
            out.append(f"  {name} = {v.value} {v.unit}{fitted}: {v.source}")
    return out


def _reason_lines(p: Prediction) -> list[str]:
    """Each range wider than ±35% of its point, and why (PredictedOp.interval_reason)."""
    out = []
    for c in p.cells:
        for op, q in c.ops.items():
            for k, why in q.interval_reason.items():
                lo, hi = q.interval[k]
                at = f" @ {c.rate:,.0f}/s" if c.rate else ""
                out.append(f"{c.workload} {c.value_size} B{at} {op} {k}: [{lo:,.0f}, {hi:,.0f}] around "
                           f"{getattr(q, k):,.0f}: {why}")
    return out


def _md_table(t: PredictionTable) -> list[str]:
    lines = [f"| {t.title} | " + " | ".join(t.columns) + " |", "|" + "---|" * (len(t.columns) + 1)]
    lines += ["| " + " | ".join(r) + " |" for r in t.rows]
    return lines


def _replica_lines(p: Prediction) -> list[str]:
    return [f"{r.workload} {r.value_size} B: replica lag p50 {fmt_time(r.lag_p50_us)} as recorded -> "
            + (f"{fmt_time(r.predicted_lag_p50_us)} with --offload-replicas committed (each write's wait for its "
               "durability on the primary, plus its link transit: from the kernel's timestamps)"
               if r.predicted_lag_p50_us else "not predicted: its stream did not leave before durability")
            for r in p.replicas]


def render_markdown(p: Prediction, out) -> None:
    out.write(f"**Predicted from {p.label}: {_change_words(p)}**\n\n")
    for t in tables(p):
        out.write("\n".join(_md_table(t)) + "\n\n")
    wide = _reason_lines(p)
    if wide:
        out.write("**Why some ranges are wide** (wider than ±35% of the point)\n\n")
        out.write("\n".join(f"- {line}" for line in wide) + "\n\n")
    out.write("**What the model stands on** (each figure from the recording; `fitted` where it was fitted to it)\n\n")
    out.write("\n".join(f"- {line.strip()}" for line in _inputs_lines(p)) + "\n")
    out.write("".join(f"\n{line}\n" for line in _replica_lines(p)))
    for e in p.errors:
        out.write(f"\nnot predicted: {e}\n")


def render_text(p: Prediction, out) -> None:
    out.write(f"Predicted from {p.label}: {_change_words(p)}\n\n")
    for t in tables(p):
        head = (t.title,) + tuple(t.columns)
        widths = [max(len(str(x)) for x in col) for col in zip(head, *t.rows)]
        out.write("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip() + "\n")
        for r in t.rows:
            out.write("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() + "\n")
        out.write("\n")
    wide = _reason_lines(p)
    if wide:
        out.write("Why some ranges are wide (wider than ±35% of the point):\n" + "\n".join(f"  {x}" for x in wide) + "\n\n")
    out.write("What the model stands on:\n" + "\n".join(_inputs_lines(p)) + "\n")
    out.write("".join(f"{line}\n" for line in _replica_lines(p)))
    for e in p.errors:
        out.write(f"not predicted: {e}\n")


def render_json(p: Prediction, out) -> None:
    json.dump(p.to_json(), out, indent=2, allow_nan=False)
    out.write("\n")


RENDER = {"text": render_text, "markdown": render_markdown, "json": render_json}
