"""HdrHistogram's text formats of a cell's latency (analysis/hdr.py): the percentile distribution (.hgrm, as
memtier_benchmark's --hdr-file-prefix and wrk2 write it; values in ms) and the interval log (.hlog, one
interval per repeat; the HdrHistogram libraries read it), both written by the hdrhistogram package."""
from __future__ import annotations

import io
import re
from datetime import datetime, timezone

from hdrh.log import HistogramLogWriter

from valkeytrace.analysis.hdr import CellLatency
from valkeytrace.recording.document import US_PER_MS  # values held in µs, written in ms (as memtier writes them)

# percentile ticks per half distance: with 25, the rows hold 50%, 90%, 95% and 99% exactly (with
# HdrHistogram's default of 5, the row after 98.91% is 99.06%)
TICKS = 25


def file_stem(c: CellLatency) -> str:
    """read-heavy_64B_GET, write-only_64B_2000rps_SET: the cell and op a file holds."""
    return f"{c.workload}_{c.value_size}B" + (f"_{c.rate:.0f}rps" if c.rate else "") + f"_{c.op}"


def hgrm(c: CellLatency) -> str:
    """The cell's percentile distribution (Value in ms, Percentile, TotalCount, 1/(1-Percentile))."""
    out = io.BytesIO()
    c.histogram.output_percentile_distribution(out, US_PER_MS, TICKS)
    # the package scales every figure of the footer but the standard deviation (hdrhistogram 0.10.8): in ms too
    sd = f"{c.histogram.get_stddev() / US_PER_MS:12.{c.histogram.significant_figures}f}"
    return re.sub(r"(StdDeviation   = )\s*[0-9.]+", lambda m: m.group(1) + sd, out.getvalue().decode(), count=1)


def hlog(c: CellLatency, label: str) -> str:
    """The interval log: a comment naming the recording, cell and op, then one compressed histogram per
    repeat, timestamps in seconds from the first repeat's start (#[StartTime] and #[BaseTime] give it)."""
    out = io.StringIO()
    w = HistogramLogWriter(out)
    w.output_comment(f"[valkeytrace: {label}, {c.workload} {c.value_size} B {c.op}: one interval per repeat, "
                     f"values in µs, from {c.source}]")
    w.output_log_format_version()
    starts = [i.start_ms for i in c.intervals]
    known = all(s is not None for s in starts)
    base = min(starts) if known and starts else 0.0
    if known and starts:
        when = datetime.fromtimestamp(base / 1000.0, timezone.utc).isoformat(" ")
        w.output_comment(f"[StartTime: {base / 1000.0:.3f} (seconds since epoch), {when}]")
        w.output_base_time(base)
    w.output_legend()
    offset = 0.0
    for i in c.intervals:
        start = i.start_ms - base if known and i.start_ms is not None else offset
        offset = start + i.length_ms
        i.histogram.set_start_time_stamp(start)
        i.histogram.set_end_time_stamp(start + i.length_ms)
        w.output_interval_histogram(i.histogram, start / 1000.0, (start + i.length_ms) / 1000.0, US_PER_MS)
    return out.getvalue()
