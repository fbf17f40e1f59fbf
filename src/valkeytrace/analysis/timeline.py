"""Each run's per-thread timeline, as a trace viewer shows it: one track per server thread (named
by role and thread name), slices for fdatasync/fsync calls on every thread and, on the main
thread, its blocked intervals (inside fdatasync, AOF write, epoll_wait, other; waiting for CPU),
nested (a blocked interval lies inside the call it happened in), and the clients' throughput over
time. Times are µs from the start of the run's measured window. reporters/perfetto.py renders it."""
from __future__ import annotations

from dataclasses import dataclass, field

from valkeytrace.analysis.summary import BLOCKED_IN as OFFCPU_NAMES
from valkeytrace.recording.model import ServerWindow, decode


@dataclass
class Slice:
    tid: int
    ts: float       # µs into the window
    dur: float      # µs
    name: str
    cause: str
    state: str

    @property
    def category(self) -> str:
        return "call" if self.state == "call" else "off-cpu"


@dataclass
class RunTimeline:
    name: str
    threads: list = field(default_factory=list)    # [(tid, track name, sort index)]
    slices: list = field(default_factory=list)     # [Slice], parents before children per track
    counters: list = field(default_factory=list)   # [(counter name, ts µs, value, unit)]


def slice_name(cause: str, state: str) -> str:
    if state == "call":
        return cause
    if state == "runnable":
        return "waiting for CPU"
    return OFFCPU_NAMES.get(cause, f"blocked ({cause})")


def run_timelines(doc, t_from_s: float | None = None, t_to_s: float | None = None) -> list[RunTimeline]:
    doc = decode(doc)
    lo = (t_from_s or 0.0) * 1e6
    hi = t_to_s * 1e6 if t_to_s is not None else float("inf")
    out = []
    ports = [n.port for n in doc.nodes if n.role == "replica"]
    for run in doc.runs:
        name = f"{doc.label} · {run.workload} {run.value_size} B #{run.repeat}"
        tl = RunTimeline(name)
        out.append(tl)
        server = run.server
        if not server:
            continue
        _threads_and_slices(tl, server, lo, hi, 0.0)
        # each replica (record --replicas, valkeytrace merge) a process of its own, on the primary's
        # window: its start_mono_ns is on the primary's clock (a merged replica's was moved there)
        for i, w in enumerate(run.replicas):
            port = ports[i] if i < len(ports) else None
            rtl = RunTimeline(f"{name} · replica {i + 1}" + (f" (port {port})" if port else ""))
            shift = ((w.start_mono_ns or 0) - (server.start_mono_ns or 0)) / 1e3 \
                if w.start_mono_ns is not None and server.start_mono_ns is not None else 0.0
            _threads_and_slices(rtl, w, lo - shift, hi - shift, shift)
            out.append(rtl)
        out += _cluster_nodes(doc, run, name, server, lo, hi)
        _failover_marks(tl, run)
        for op, res in run.ops.items():
            started = res.started_at or run.window_start
            for sec, rps, _mean in res.progress:
                ts = ((started or 0) - (run.window_start or 0) + sec) * 1e6
                if lo <= ts <= hi:
                    tl.counters.append((f"client {op} rps ({res.role or ''})", round(ts, 3), rps, "rps"))
        _memory_counters(tl, run, lo, hi)
    return out


def _cluster_nodes(doc, run, name: str, server: ServerWindow, lo: float, hi: float) -> list[RunTimeline]:
    """record --cluster: every other node a process of its own beside shard 0's primary, on one host's clock."""
    out = []
    nodes = doc.cluster.nodes[1:] if doc.cluster is not None else []
    for node, w in zip(nodes, run.node_windows):
        if w is None:
            continue
        rtl = RunTimeline(f"{name} · shard {node.shard} {node.role} (port {node.port})")
        shift = ((w.start_mono_ns or 0) - (server.start_mono_ns or 0)) / 1e3 \
            if w.start_mono_ns is not None and server.start_mono_ns is not None else 0.0
        _threads_and_slices(rtl, w, lo - shift, hi - shift, shift)
        out.append(rtl)
    return out


FAILOVER_TID = 1 << 30  # the failover's marks: a track of their own in the run's process


def _failover_marks(tl: RunTimeline, run) -> None:
    """record --failover: the kill to the new primary's first acknowledged write, and the promotion, marked."""
    f = run.failover
    if f is None or f.killed_at_s is None:
        return
    tl.threads.append((FAILOVER_TID, f"failover of shard {f.shard}", -1))
    at = (f.killed_at_s or 0.0) * 1e6
    if f.unavailable_ms is not None:
        tl.slices.append(Slice(FAILOVER_TID, at, f.unavailable_ms * 1e3, "shard unavailable (kill -> first ack)",
                               "failover", "call"))
    if f.promoted_at_s is not None:
        tl.slices.append(Slice(FAILOVER_TID, f.promoted_at_s * 1e6, 1.0, "replica promoted", "failover", "call"))


# runs[].memory's columns as counter tracks (tracers/memory.py): (column, track, unit)
MEMORY_TRACKS = (("held_replies", "server held replies", "replies"), ("held_bytes", "server held reply bytes", "bytes"),
                 ("dirty_keys", "server dirty keys", "keys"), ("aof_buffer_bytes", "server AOF buffer", "bytes"),
                 ("rss_kb", "server RSS", "kB"))


def _memory_counters(tl: RunTimeline, run, lo: float, hi: float) -> None:
    """What the server held over the window, sampled (null samples left out: no source then)."""
    m = run.memory
    if m is None:
        return
    for col, track, unit in MEMORY_TRACKS:
        if col not in m.columns:
            continue
        i, t = m.columns.index(col), m.columns.index("t_s")
        for row in m.samples:
            ts = (row[t] or 0.0) * 1e6
            if row[i] is not None and lo <= ts <= hi:
                tl.counters.append((track, round(ts, 3), row[i], unit))


def _threads_and_slices(tl: RunTimeline, server: ServerWindow, lo: float, hi: float, shift_us: float) -> None:
    """A server window's threads and blocked/call slices, its offsets moved by shift_us."""
    main = server.main_tid
    for t in server.threads:
        role = "main" if t.tid == main else t.role
        tl.threads.append((t.tid, f"{role} ({t.name})", 0 if role == "main" else t.tid))
    slices = []
    for start_ns, dur_ns, tid, cause, state in server.blocked_timeline.events:
        ts, dur = start_ns / 1e3, dur_ns / 1e3
        if ts + dur < lo or ts > hi:
            continue
        slices.append(Slice(tid, round(ts + shift_us, 3), round(dur, 3), slice_name(cause, state), cause, state))
    tl.slices = nest(slices)


def nest(slices: list[Slice]) -> list[Slice]:
    """Per track, sort parents before children and drop a slice that would cross its parent's end
    (clock jitter between a syscall exit and a context switch can make them touch)."""
    out = []
    by_track: dict = {}
    for s in slices:
        by_track.setdefault(s.tid, []).append(s)
    for track in by_track.values():
        track.sort(key=lambda s: (s.ts, -s.dur))
        stack: list[float] = []
        for s in track:
            end = s.ts + s.dur
            while stack and stack[-1] <= s.ts:
                stack.pop()
            if stack and end > stack[-1]:
                s.dur = round(stack[-1] - s.ts, 3)  # clip into the parent
                end = stack[-1]
                if s.dur <= 0:
                    continue
            stack.append(end)
            out.append(s)
    return out
