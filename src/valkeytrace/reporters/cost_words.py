"""The tracer's own cost (analysis/tracer_cost.py) in words: one line per cell, and the per-program table."""
from __future__ import annotations

from valkeytrace.analysis.tracer_cost import CellCost


def cost_line(c: CellCost | None) -> str | None:
    if c is None:
        return None
    bpf = (f"{c.bpf_ns_per_request:,.0f} ns of BPF per request ({len(c.programs)} programs, "
           f"{c.bpf_ms_per_s:.1f} ms a second)" if c.bpf_ns_per_request is not None and c.bpf_ms_per_s is not None
           else "BPF run time not counted (the kernel's BPF statistics could not be turned on)")
    cpu = f"{c.tracer_cpu_pct_of_core:.2f}% of a core" if c.tracer_cpu_pct_of_core is not None else "CPU not measured"
    rss = f"peak RSS {c.peak_rss_mb:,.0f} MB" if c.peak_rss_mb is not None else ""
    return f"the tracer's own cost: {bpf}; valkeytrace's process {cpu}" + (f", {rss}" if rss else "") \
        + " (the kernel's BPF statistics, runs[].tracer.cost)"


def program_rows(c: CellCost) -> list[list[str]]:
    """program | attached to | runs/s | ns/run | ns/request"""
    f = (lambda v, p="{:,.0f}": "–" if v is None else p.format(v))  # noqa: E731
    return [[p.name, p.attach or "?", f(p.runs_per_s), f(p.ns_per_run), f(p.ns_per_request, "{:,.1f}")]
            for p in c.programs if p.runs_per_s]
