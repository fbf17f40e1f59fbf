"""The dirty-replica trade (analysis/trade.py) in words: one verdict line per replicated cell, naming what the
candidate's way of keeping the stream gives and what it costs, then every figure side by side."""
from __future__ import annotations

from valkeytrace.analysis.trade import ReplicaTrade
from valkeytrace.reporters.facts_words import fmt_time

NAMES = {"reads_dirty": "dirty replica reads", "phantom_reads": "phantom reads after the kill",
         "writes_seen_dirty_share": "writes on a replica before durable", "lag_p50_us": "replica lag p50",
         "waitaof_p50_us": "WAITAOF p50", "waitaof_p99_us": "WAITAOF p99", "replica_get_p50_us": "REPLICA_GET p50",
         "replica_get_p99_us": "REPLICA_GET p99", "set_p50_us": "the primary's SET p50", "set_tps": "SET TPS"}


def _mode(m: str | None) -> str:
    return m or "no durable offload"


def _fig(name: str, v, reads) -> str:
    if v is None:
        return "–"
    if name == "reads_dirty":
        return f"{v:,}" + (f" of {reads:,} checked" if reads else "")
    if name == "phantom_reads":
        return f"{v:,}"
    if name == "writes_seen_dirty_share":
        return f"{v:.0%}"
    if name == "set_tps":
        return f"{v / 1000:.2f}K/s"
    return fmt_time(v)


def trade_line(t: ReplicaTrade) -> tuple[tuple[str, str], str]:
    """((the cell, the trade in one line), every figure side by side)."""
    gains = ", ".join(f"fewer {NAMES[n]}" if n in ("reads_dirty", "phantom_reads", "writes_seen_dirty_share")
                      else f"better {NAMES[n]}" for n in t.gains) or "nothing measured"
    costs = ", ".join(f"more {NAMES[n]}" if n in ("reads_dirty", "phantom_reads", "writes_seen_dirty_share")
                      else f"worse {NAMES[n]}" for n in t.costs) or "nothing measured"
    line = f"{_mode(t.modes[1])} vs {_mode(t.modes[0])}: gives {gains}; costs {costs}"
    figs = "; ".join(f"{NAMES[n]} {_fig(n, b, t.reads[0])} -> {_fig(n, c, t.reads[1])}"
                     + (f" (predicted from the baseline: {fmt_time(t.predicted_lag_p50_us)}, "
                        f"{t.predicted_error_pct:+.0f}%)" if n == "lag_p50_us" and t.predicted_lag_p50_us else "")
                     for n, (b, c) in t.figures.items() if b is not None or c is not None)
    return (f"{t.workload} {t.value_size} B replicas", line), figs
