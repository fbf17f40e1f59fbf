"""Chrome trace-event JSON (opens in Perfetto / chrome://tracing) from a recording.

One process per measured run (cell x repeat); one track per server thread, named by role and
thread name (thread_name metadata); complete ("X") slices for fdatasync/fsync calls on every
thread and, on the main thread, its blocked intervals (inside fdatasync, AOF write, epoll_wait,
other; waiting for CPU). A blocked interval lies inside the call it happened in, so slices on a
track nest and never overlap. Client throughput, where the client printed it over time, is a
counter track. Times are µs from the start of the run's measured window.
"""
from __future__ import annotations

OFFCPU_NAMES = {"fdatasync": "blocked in fdatasync", "fsync": "blocked in fsync", "aof_write": "blocked in AOF write",
                "epoll_wait": "idle (epoll_wait)", "other": "blocked (other)", "socket_write": "blocked in socket write"}


def _slice_name(cause: str, state: str) -> str:
    if state == "call":
        return cause
    if state == "runnable":
        return "waiting for CPU"
    return OFFCPU_NAMES.get(cause, f"blocked ({cause})")


def build(doc: dict, t_from_s: float | None = None, t_to_s: float | None = None) -> dict:
    lo = (t_from_s or 0.0) * 1e6
    hi = t_to_s * 1e6 if t_to_s is not None else float("inf")
    events = []
    for i, run in enumerate(doc.get("runs", [])):
        server = run.get("server")
        pid = i + 1
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"{doc['label']} · {run['workload']} {run['value_size']} B #{run.get('repeat')}"}})
        if not server:
            continue
        main = server.get("main_tid")
        for t in server.get("threads", []):
            role = "main" if t["tid"] == main else t["role"]
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": t["tid"],
                           "args": {"name": f"{role} ({t['name']})"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": t["tid"],
                           "args": {"sort_index": 0 if role == "main" else t["tid"]}})
        slices = []
        for start_ns, dur_ns, tid, cause, state in server.get("blocked_timeline", {}).get("events", []):
            ts, dur = start_ns / 1e3, dur_ns / 1e3
            if ts + dur < lo or ts > hi:
                continue
            slices.append({"ph": "X", "name": _slice_name(cause, state), "cat": "call" if state == "call" else "off-cpu",
                           "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3),
                           "args": {"cause": cause, "state": state}})
        events.extend(_nest(slices))
        window_start = run.get("window_start")
        for op, res in run.get("ops", {}).items():
            started = res.get("started_at") or window_start
            for sec, rps, _mean in res.get("progress") or []:
                ts = ((started or 0) - (window_start or 0) + sec) * 1e6
                if lo <= ts <= hi:
                    events.append({"ph": "C", "name": f"client {op} rps ({res.get('role', '')})", "pid": pid,
                                   "ts": round(ts, 3), "args": {"rps": rps}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "metadata": {"source": "valkeytrace", "label": doc.get("label")}}


def _nest(slices: list[dict]) -> list[dict]:
    """Per track, sort parents before children and drop a slice that would cross its parent's end
    (clock jitter between a syscall exit and a context switch can make them touch)."""
    out = []
    by_track: dict = {}
    for s in slices:
        by_track.setdefault((s["pid"], s["tid"]), []).append(s)
    for track in by_track.values():
        track.sort(key=lambda s: (s["ts"], -s["dur"]))
        stack: list[float] = []
        for s in track:
            end = s["ts"] + s["dur"]
            while stack and stack[-1] <= s["ts"]:
                stack.pop()
            if stack and end > stack[-1]:
                s["dur"] = round(stack[-1] - s["ts"], 3)  # clip into the parent
                end = stack[-1]
                if s["dur"] <= 0:
                    continue
            stack.append(end)
            out.append(s)
    return out
