"""Chrome trace-event JSON (opens in Perfetto / chrome://tracing) from a recording's timelines
(analysis/timeline.py): one process per measured run (cell x repeat), one track per server
thread (thread_name metadata), complete ("X") slices, the clients' throughput and what the server held in memory (held replies, dirty
keys, the AOF buffer, its RSS) as counters."""
from __future__ import annotations

from valkeytrace.analysis.timeline import run_timelines
from valkeytrace.recording.model import decode


def build(doc, t_from_s: float | None = None, t_to_s: float | None = None) -> dict:
    doc = decode(doc)
    events = []
    for pid, tl in enumerate(run_timelines(doc, t_from_s, t_to_s), start=1):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": tl.name}})
        for tid, name, sort_index in tl.threads:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": sort_index}})
        events.extend({"ph": "X", "name": s.name, "cat": s.category, "pid": pid, "tid": s.tid, "ts": s.ts,
                       "dur": s.dur, "args": {"cause": s.cause, "state": s.state}} for s in tl.slices)
        events.extend({"ph": "C", "name": name, "pid": pid, "ts": ts, "args": {unit: value}}
                      for name, ts, value, unit in tl.counters)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "metadata": {"source": "valkeytrace", "label": doc.label}}
