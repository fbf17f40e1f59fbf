"""Plots of one or two analysed recordings (matplotlib, Agg backend: no display needed).

  latency_cdf      client latency CDFs per value size, baseline over candidate
  budget           the main-thread time budget as stacked bars, per system and cell
  fsync_hist       fdatasync/fsync latency histograms per thread role
  blocked_timeline main-thread blocked intervals (and fsync calls) over the first seconds
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text as text in SVG (searchable, ~4x smaller), not glyph paths
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from valkeytrace.analysis.report import ReportInput  # noqa: E402
from valkeytrace.analysis.tables import MEASURED_OP  # noqa: E402

BUDGET = [("on_cpu_pct", "on CPU", "#4c72b0"), ("blocked_in_fsync_pct", "blocked in fsync", "#c44e52"),
          ("blocked_in_aof_write_pct", "blocked in AOF write", "#dd8452"),
          ("waiting_for_cpu_pct", "waiting for CPU", "#8172b3"), ("idle_pct", "idle (epoll_wait)", "#55a868"),
          ("other_blocked_pct", "other blocked", "#937860")]
CAUSE_COLORS = {"fdatasync": "#c44e52", "fsync": "#c44e52", "aof_write": "#dd8452", "epoll_wait": "#55a868",
                "other": "#937860", "socket_write": "#64b5cd"}
SYSTEM_STYLES = ("-", "--")


def _title(inp: ReportInput) -> str:
    labels = [r.label for r in inp.runs]
    return " vs ".join(labels) if len(labels) == 2 else labels[0]


def latency_cdf(inp: ReportInput):
    cells = sorted({(c.workload, c.value_size) for r in inp.runs for c in r.cells if MEASURED_OP.get(c.workload)})
    if not cells:
        return None
    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells), 3.6), squeeze=False)
    for ax, (workload, size) in zip(axes[0], cells):
        op = MEASURED_OP[workload]
        for style, run in zip(SYSTEM_STYLES, inp.runs):
            for i, (lat_us, pct) in enumerate(run.latency_cdfs(workload, size, op)):
                ax.step(lat_us, pct, where="post", linestyle=style, alpha=0.85,
                        label=run.label if i == 0 else None)
        ax.set_xscale("log")
        ax.set_xlabel(f"{op} latency (µs, log)")
        ax.set_ylabel("percentile")
        ax.set_title(f"{workload} {size} B")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Client latency CDF: {_title(inp)}")
    fig.tight_layout(rect=(0, 0, 1, 0.93))  # room for the suptitle, which tight_layout ignores
    return fig


def budget(inp: ReportInput):
    bars = [(f"{run.label}\n{c.workload} {c.value_size}B", c.server["main_thread"])
            for c_key in sorted({(c.workload, c.value_size) for r in inp.runs for c in r.cells})
            for run in inp.runs for c in run.cells
            if (c.workload, c.value_size) == c_key and c.server]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(bars)), 4))
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for key, name, color in BUDGET:
        vals = np.array([m.get(key) or 0 for _, m in bars])
        ax.bar(x, vals, bottom=bottom, label=name, color=color)
        bottom += vals
    ax.set_xticks(x, [b[0] for b in bars], fontsize=7)
    ax.set_ylabel("% of main-thread wall time")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(f"Main-thread time budget: {_title(inp)}")
    fig.tight_layout()
    return fig


def fsync_hist(inp: ReportInput):
    panels = []
    for run in inp.runs:
        for c in run.cells:
            hists = run.sync_histograms(c.workload, c.value_size)
            if hists:
                panels.append((f"{run.label} · {c.workload} {c.value_size} B", hists))
    if not panels:
        return None
    panels = panels[:6]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    edges = np.geomspace(1, 1e6, 61)  # µs, log-spaced display bins
    for ax, (title, hists) in zip(axes[0], panels):
        for role, h in sorted(hists.items(), key=lambda kv: -kv[1]["count"]):
            ax.hist(h["mids_us"], bins=edges, weights=h["counts"], histtype="step", linewidth=1.5,
                    label=f"{role} (n={h['count']:,}, p50 {h['p50_us']:,.0f} µs)")
        ax.set_xscale("log")
        ax.set_xlabel("fdatasync/fsync latency (µs, log)")
        ax.set_ylabel("calls")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("fsync latency by thread role")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def blocked_timeline(inp: ReportInput, seconds: float = 2.0):
    rows = [(run.label, tl) for run in inp.runs if (tl := run.first_blocked_timeline(seconds)) is not None]
    if not rows:
        return None
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 1.9 * len(rows) + 0.6), squeeze=False)
    for ax, (label, tl) in zip(axes[:, 0], rows):
        lanes = tl["lanes"]
        for y, (lane, segs) in enumerate(sorted(lanes.items())):
            colors = [CAUSE_COLORS.get(c, "#999999") for _, _, c in segs]
            # thousands of intervals: drawn as one image inside the SVG, not one path each
            ax.broken_barh([(s, max(d, 0.02)) for s, d, _ in segs], (y - 0.4, 0.8), facecolors=colors, rasterized=True)
        ax.set_yticks(range(len(lanes)), sorted(lanes), fontsize=7)
        ax.set_xlim(0, seconds * 1e3)
        ax.set_xlabel("ms into the measured window")
        ax.set_title(f"{label}: {tl['workload']} {tl['value_size']} B, first {seconds:g} s "
                     "(red = fsync, green = epoll_wait, brown = other)", fontsize=9)
    fig.tight_layout()
    return fig


PLOTS = {"latency_cdf": latency_cdf, "budget": budget, "fsync_hist": fsync_hist,
         "blocked_timeline": blocked_timeline}


def make_all(inp: ReportInput) -> dict:
    """{name: figure} for every plot the recordings have data for."""
    out = {}
    for name, fn in PLOTS.items():
        fig = fn(inp)
        if fig is not None:
            out[name] = fig
    return out


def write_png(inp: ReportInput, directory: str) -> list[str]:
    import os

    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, fig in make_all(inp).items():
        path = os.path.join(directory, f"{name}.png")
        fig.savefig(path, dpi=110, bbox_inches="tight")  # legends placed outside the axes included
        plt.close(fig)
        paths.append(path)
    return paths
