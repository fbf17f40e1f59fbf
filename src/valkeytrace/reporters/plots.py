"""Plots of one or two analysed recordings (matplotlib, Agg backend: no display needed).

  latency_cdf      client latency CDFs, a panel per cell, every repeat of both systems named
  budget           the main-thread time budget as stacked bars, per system and cell
  fsync_hist       fdatasync/fsync latency histograms, a panel per cell, both systems' thread roles
  blocked_timeline main-thread blocked intervals (and fsync calls) over the first seconds
  latency_throughput open loop at two rates or more: p50/p99 against the achieved rate, per side
  memory           what the server held over a window (held replies, AOF buffer, RSS), the stalls shaded
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text as text in SVG (searchable, ~4x smaller), not glyph paths
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from valkeytrace.analysis.report import ReportInput  # noqa: E402
from valkeytrace.analysis.summary import BUDGET  # noqa: E402
from valkeytrace.analysis.tables import MEASURED_OP  # noqa: E402

# one colour per budget category (analysis/summary.BUDGET, in its order)
BUDGET_COLORS = ("#4c72b0", "#c44e52", "#dd8452", "#8172b3", "#55a868", "#937860")
# a cause is coloured as the budget category its blocked time falls in
CAUSE_COLORS = {c: color for cat, color in zip(BUDGET, BUDGET_COLORS) for c in cat.calls}
SYSTEM_STYLES = ("-", "--")


def _title(inp: ReportInput) -> str:
    labels = [r.label for r in inp.runs]
    return " vs ".join(labels) if len(labels) == 2 else labels[0]


SYSTEM_COLORS = (plt.cm.Blues, plt.cm.Reds)  # baseline, candidate: a shade per repeat


def _grid(n: int, w: float = 4.2, h: float = 3.6):
    """Panels in rows of three at most: readable when the page shrinks the figure to its width."""
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def latency_cdf(inp: ReportInput):
    """One panel per measured cell; in it, each repeat of each system, named in the legend."""
    cells = sorted({(c.workload, c.value_size) for r in inp.runs for c in r.cells if MEASURED_OP.get(c.workload)})
    if not cells:
        return None
    fig, axes = _grid(len(cells))
    for ax, (workload, size) in zip(axes, cells):
        op = MEASURED_OP[workload]
        for k, run in enumerate(inp.runs):
            curves = run.latency_cdfs(workload, size, op)
            for i, (lat_us, pct) in enumerate(curves):
                shade = SYSTEM_COLORS[k % 2](0.45 + 0.5 * (i + 1) / (len(curves) + 1))
                ax.step(lat_us, pct, where="post", linestyle=SYSTEM_STYLES[k % 2], color=shade, alpha=0.9,
                        label=f"{run.label} #{i + 1}")
        ax.set_xscale("log")
        ax.set_xlabel(f"{op} latency (µs, log)")
        ax.set_ylabel("percentile")
        ax.set_title(f"{workload} {size} B {op}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="system #repeat", title_fontsize=7)
    fig.suptitle(f"Client latency CDF: {_title(inp)}")
    fig.tight_layout(rect=(0, 0, 1, 0.95))  # room for the suptitle, which tight_layout ignores
    return fig


def budget(inp: ReportInput):
    bars = [(f"{run.label}\n{c.workload} {c.value_size}B", c.server.main_thread)
            for c_key in sorted({(c.workload, c.value_size) for r in inp.runs for c in r.cells})
            for run in inp.runs for c in run.cells
            if (c.workload, c.value_size) == c_key and c.server]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(bars)), 4))
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for cat, color in zip(BUDGET, BUDGET_COLORS):
        vals = np.array([getattr(m, cat.name) or 0 for _, m in bars])
        ax.bar(x, vals, bottom=bottom, label=cat.label, color=color)
        bottom += vals
    ax.set_xticks(x, [b[0] for b in bars], fontsize=7)
    ax.set_ylabel("% of main-thread wall time")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(f"Main-thread time budget: {_title(inp)}")
    fig.tight_layout()
    return fig


def fsync_hist(inp: ReportInput):
    """One panel per cell, both systems in it: each thread role's fdatasync/fsync histogram."""
    keys = sorted({(c.workload, c.value_size) for r in inp.runs for c in r.cells})
    panels = []
    for workload, size in keys:
        lines = [(run.label, k, role, h) for k, run in enumerate(inp.runs)
                 for role, h in sorted((run.sync_histograms(workload, size) or {}).items(), key=lambda kv: -kv[1].count)]
        if lines:
            panels.append((f"{workload} {size} B", lines))
    if not panels:
        return None
    fig, axes = _grid(len(panels), h=3.4)
    edges = np.geomspace(1, 1e6, 61)  # µs, log-spaced display bins
    for ax, (title, lines) in zip(axes, panels):
        for label, k, role, h in lines:
            ax.hist(h.mids_us, bins=edges, weights=h.counts, histtype="step", linewidth=1.5,
                    linestyle=SYSTEM_STYLES[k % 2],
                    label=f"{label} · {role} (n={h.count:,}, p50 {h.p50_us:,.0f} µs)")
        ax.set_xscale("log")
        ax.set_xlabel("fdatasync/fsync latency (µs, log)")
        ax.set_ylabel("calls")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    fig.suptitle("fsync latency by system and thread role")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def blocked_timeline(inp: ReportInput, seconds: float = 2.0):
    rows = [(run.label, tl) for run in inp.runs if (tl := run.first_blocked_timeline(seconds)) is not None]
    if not rows:
        return None
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 1.9 * len(rows) + 0.6), squeeze=False)
    for ax, (label, tl) in zip(axes[:, 0], rows):
        lanes = tl.lanes
        for y, (lane, segs) in enumerate(sorted(lanes.items())):
            colors = [CAUSE_COLORS.get(c, BUDGET_COLORS[-1]) for _, _, c in segs]  # else: other blocked
            # thousands of intervals: drawn as one image inside the SVG, not one path each
            ax.broken_barh([(s, max(d, 0.02)) for s, d, _ in segs], (y - 0.4, 0.8), facecolors=colors, rasterized=True)
        ax.set_yticks(range(len(lanes)), sorted(lanes), fontsize=7)
        ax.set_xlim(0, seconds * 1e3)
        ax.set_xlabel("ms into the measured window")
        ax.set_title(f"{label}: {tl.workload} {tl.value_size} B, first {seconds:g} s "
                     "(red = fsync, green = epoll_wait, brown = other)", fontsize=9)
    fig.tight_layout()
    return fig


def latency_throughput(inp: ReportInput):
    """Open loop at two rates or more: p50 (solid) and p99 (dashed) against the achieved rate, both sides
    on one log-scale latency axis, a saturated point hollow."""
    curves = inp.curves or []
    cells = sorted({(c.workload, c.value_size, c.op) for c in curves})
    if not cells:
        return None
    fig, axes = _grid(len(cells))
    labels = [r.label for r in inp.runs]
    for ax, (workload, size, op) in zip(axes, cells):
        for cv in [c for c in curves if (c.workload, c.value_size, c.op) == (workload, size, op)]:
            k = labels.index(cv.label) if cv.label in labels else 0
            color = ("#4c72b0", "#c44e52")[k % 2]
            xs = [p.achieved_rate or 0 for p in cv.points]
            for metric, style in (("p50_us", "-"), ("p99_us", "--")):
                ys = [getattr(p, metric) or np.nan for p in cv.points]
                ax.plot(xs, ys, style, color=color, label=f"{cv.label} {metric[:3]}")
                for x, y, p in zip(xs, ys, cv.points):
                    ax.plot([x], [y], "o", color=color, markerfacecolor="none" if p.saturated else color)
        ax.set_yscale("log")
        ax.set_xlabel("achieved requests/s")
        ax.set_ylabel(f"{op} latency from its due moment (µs)")
        ax.set_title(f"{workload} {size} B {op}")
        ax.legend(fontsize=7)
    fig.suptitle(_title(inp) + ": latency-throughput (open loop)")
    fig.tight_layout()
    return fig


def memory(inp: ReportInput):
    """A panel per side and cell with a sampled window: held replies (left axis), the AOF buffer and the
    RSS in MB (right axis), over the window with the largest held peak; its injected stalls shaded."""
    panels = [(run.label, key, m) for run in inp.runs for key, m in run.memory.items() if m.timeline]
    if not panels:
        return None
    fig, axes = _grid(len(panels))
    for ax, (label, (workload, size, rate), m) in zip(axes, panels):
        cols = m.to_json()["timeline_columns"]
        rows = np.array([[np.nan if v is None else v for v in r] for r in m.timeline], dtype=float)
        t = rows[:, cols.index("t_s")]
        if m.stalls:
            for a, b in m.stalls:
                ax.axvspan(a, b if b is not None else t[-1], color="#c44e52", alpha=0.12, lw=0)
        ax.plot(t, rows[:, cols.index("held_replies")], color="#4c72b0", label="held replies")
        ax.set_xlabel("seconds into the window" + ("; stalls shaded" if m.stalls else ""))
        ax.set_ylabel("replies held")
        right = ax.twinx()
        right.plot(t, rows[:, cols.index("aof_buffer_bytes")] / 1e6, color="#dd8452", label="AOF buffer (MB)")
        right.plot(t, rows[:, cols.index("rss_kb")] / 1024, color="#55a868", label="RSS (MB)")
        right.set_ylabel("MB")
        ax.set_title(f"{label}: {workload} {size} B" + (f" @ {rate:,.0f}/s" if rate else ""), fontsize=9)
        ax.grid(alpha=0.3)
        lines = ax.get_lines() + right.get_lines()
        ax.legend(lines, [x.get_label() for x in lines], fontsize=7)
    fig.suptitle(f"What the server held: {_title(inp)}")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


PLOTS = {"latency_cdf": latency_cdf, "budget": budget, "fsync_hist": fsync_hist,
         "blocked_timeline": blocked_timeline, "latency_throughput": latency_throughput, "memory": memory}


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
