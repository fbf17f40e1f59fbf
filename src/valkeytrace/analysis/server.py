"""Server-side summaries from the tracers' raw window data (pure: no I/O, no bcc).

A cell's server metrics aggregate its successful repeats: histograms are merged, times and
counts summed, and percentages taken against the summed wall time.

Main-thread time budget (sums to 100% of the measured window by construction):
  waiting_for_cpu  off-CPU while runnable (preempted), whatever it was doing;
  blocked_in_fsync off-CPU, not runnable, inside fdatasync/fsync (with the shim: its wrapper,
                   so an injected delay counts as fsync time);
  blocked_in_aof_write  off-CPU, not runnable, inside a write to an AOF file;
  idle             off-CPU, not runnable, inside epoll_wait (nothing to do);
  other_blocked    off-CPU, not runnable, anywhere else;
  on_cpu           the rest of the wall time.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import msgspec

from valkeytrace.histogram import LatencyHistogram
from valkeytrace.analysis.durability import durability
from valkeytrace.analysis.note import Note
from valkeytrace.analysis.summary import (BUDGET, SYNC_CALLS, TIMED_CALLS, BackendCounts, CallStats, CrossCheck,
                                          MainThread,
                                          ServerSummary, Stalls, ThreadRole, budget_category)
from valkeytrace.recording.model import Document, Histogram, Run, ServerWindow, ThreadRecord, decode, decode_as
from valkeytrace.roles import ROLES, thread_role

CALLS = TIMED_CALLS


def _hist(rec) -> LatencyHistogram:
    return LatencyHistogram.from_record(rec) if rec else LatencyHistogram()


def call_summary(h: LatencyHistogram, nbytes: int = 0) -> CallStats:
    if not h.count:
        return CallStats(bytes=nbytes)
    p50, p99 = h.percentiles([50, 99])
    return CallStats(count=h.count, p50_us=p50 / 1e3, p99_us=p99 / 1e3, max_us=h.max_ns / 1e3,
                     total_ms=h.sum_ns / 1e6, bytes=nbytes)


def budget(off_cpu_ns: dict, wall_ns: int) -> dict:
    """The budget's percentages (analysis/summary.BUDGET, by field name) from {cause: {state: ns}}
    over wall_ns, and off_cpu_over_wall_pct when the intervals exceeded the window."""
    ns = {c.name: 0.0 for c in BUDGET}
    for cause, by_state in off_cpu_ns.items():
        for state, v in by_state.items():
            ns[budget_category(cause, state).name] += v
    on_cpu = BUDGET[0].name  # the rest of the wall
    off = sum(ns.values())
    if wall_ns <= 0:
        return {**{k: None for k in ns}, "off_cpu_over_wall_pct": None}
    over = None
    if off > wall_ns:  # edge effects: never report more than the wall (and say it was scaled)
        over = 100.0 * off / wall_ns
        scale = wall_ns / off
        ns = {k: v * scale for k, v in ns.items()}
        off = wall_ns
    ns[on_cpu] = wall_ns - off
    return {**{k: 100.0 * v / wall_ns for k, v in ns.items()}, "off_cpu_over_wall_pct": over}


@dataclass
class _RoleAcc:
    """One thread role's figures summed over a cell's windows."""
    names: set = field(default_factory=set)
    tids: set = field(default_factory=set)
    calls: dict = field(default_factory=lambda: defaultdict(LatencyHistogram))
    bytes: dict = field(default_factory=lambda: defaultdict(int))
    off_cpu_ns: dict = field(default_factory=lambda: defaultdict(float))
    in_sync_ns: float = 0.0
    sched_on_cpu_ns: float = 0.0
    sched_runqueue_ns: float = 0.0
    sched_windows: int = 0
    windows: int = 0
    wall_ns: int = 0

    def thread_role(self, role: str, n_windows: int) -> ThreadRole:
        th = ThreadRole(role=role, names=sorted(self.names), threads=len(self.tids))
        for call in CALLS:
            setattr(th, call, call_summary(self.calls[call], self.bytes[call]))
        th.off_cpu_ms = sum(self.off_cpu_ns.values()) / 1e6
        th.off_cpu_ms_by_state = {s: v / 1e6 for s, v in self.off_cpu_ns.items()}
        # the kernel's own accounting (/proc/PID/task/TID/schedstat) over the same windows, when
        # every window of every thread of the role has it
        th.schedstat = ({"on_cpu_ms": self.sched_on_cpu_ns / 1e6, "runqueue_ms": self.sched_runqueue_ns / 1e6}
                        if self.windows and self.sched_windows == self.windows else None)
        th.wall_ms = self.wall_ns / 1e6 / max(1, len(self.tids))
        # the role's thread time: each of its threads over each window it was in (launches apart:
        # a role's threads of two launches are two tids, each there half the time)
        th.thread_wall_ms = self.wall_ns / 1e6
        th.threads_per_window = round(self.windows / n_windows, 2)
        # an fsync still in flight at a window's end is in no histogram yet, but its blocked time is
        th.blocked_in_sync_ms = self.in_sync_ns / 1e6
        return th


def role_of(t: ThreadRecord, w: ServerWindow) -> str:
    """A thread's role from its name, by today's table (recordings keep the role they were made with)."""
    main_tid = w.main_tid or w.pid
    return thread_role(t.tid, main_tid, t.name) if t.name and main_tid else t.role


def estimated(rec: Histogram, share: float | None) -> Histogram:
    """A call timed for a share of its window (probe.sampled: an observing window's AOF writes) as the whole
    window's estimate: its count, total time and bytes over the share; its distribution the sample's."""
    if not share or share >= 1.0:
        return rec
    k = 1.0 / share
    return msgspec.structs.replace(rec, count=round(rec.count * k), sum_ns=round(rec.sum_ns * k),
                                   buckets=[(i, round(c * k)) for i, c in rec.buckets],
                                   bytes=None if rec.bytes is None else round(rec.bytes * k))


def _windows(raws: list) -> list[ServerWindow]:
    """The windows, typed; a sampled call's histograms (probe.sampled) as the whole window's estimates."""
    ws = [decode_as(r, ServerWindow) for r in raws if r]
    return [w if not w.probe.sampled else msgspec.structs.replace(w, threads=[
        msgspec.structs.replace(t, calls={c: estimated(rec, w.probe.sampled.get(c)) for c, rec in t.calls.items()})
        for t in w.threads]) for w in ws]


def _sampled(ws: list[ServerWindow]) -> dict[str, float]:
    """call -> the mean share of the windows it was timed, for the calls some window sampled."""
    calls = {c for w in ws for c in (w.probe.sampled or {})}
    return {c: sum((w.probe.sampled or {}).get(c, 1.0) for w in ws) / len(ws) for c in calls}


def summarize_server(raws: list) -> ServerSummary | None:
    """Merge the `server` windows of a cell's repeats into the report's server summary."""
    ws = _windows(raws)
    if not ws:
        return None
    wall_ns = sum(w.window_ns for w in ws)
    main_calls: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
    main_off: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    roles: dict[str, _RoleAcc] = {}
    # without scheduler data (the shim where /proc has no schedstat), "on CPU" is only "not in a
    # timed call": reports say so
    on_cpu_measured = any("sched" in w.probe.probe_groups for w in ws)
    for w in ws:
        for t in w.threads:
            role = role_of(t, w)
            r = roles.setdefault(role, _RoleAcc())
            r.in_sync_ns += sync_blocked_ns(t)
            r.names.add(t.name)
            r.tids.add(t.tid)
            for call, rec in t.calls.items():
                r.calls[call].merge(_hist(rec))
                r.bytes[call] += rec.bytes or 0
                if role == "main":
                    main_calls[call].merge(_hist(rec))
            on_cpu_measured = on_cpu_measured or bool(t.sched and role == "main")
            if t.sched:  # the kernel's own figures, kept beside the tracer's
                r.sched_on_cpu_ns += t.sched.on_cpu_ns
                r.sched_runqueue_ns += t.sched.runqueue_ns
                r.sched_windows += 1
            if t.sched and not t.off_cpu_ns:  # no switch seen in the window (or the shim): the kernel's accounting
                r.off_cpu_ns["runnable"] += t.sched.runqueue_ns
                r.off_cpu_ns["blocked"] += max(0, w.window_ns - t.sched.on_cpu_ns - t.sched.runqueue_ns)
                if role == "main" and "sched" not in w.probe.probe_groups:
                    _from_schedstat(main_off, t, w.window_ns)
            r.windows += 1
            r.wall_ns += w.window_ns
            for cause, by_state in t.off_cpu_ns.items():
                for state, v in by_state.items():
                    r.off_cpu_ns[state] += v
                    if role == "main":
                        main_off[cause][state] += v
    main = _main_thread(ws, main_calls, main_off, wall_ns, on_cpu_measured)
    threads = [roles[role].thread_role(role, len(ws))
               for role in sorted(roles, key=lambda x: ROLES.index(x) if x in ROLES else len(ROLES))]
    events = sum(1 for w in ws for e in w.blocked_timeline.events if e[-1] != "call")
    cross = None
    shims = [w.shim for w in ws if w.shim]
    if shims:
        shim = summarize_server(shims)
        if shim is not None:
            cross = CrossCheck(shim.main_thread, shim.threads, cross_check(main, shim.main_thread))
    probe = ws[0].probe
    return ServerSummary(backend=ws[0].backend, windows=len(ws), main_thread=main, threads=threads,
                         sched_traced=all("sched" in w.probe.probe_groups for w in ws),
                         lost_events=sum(w.lost_events or 0 for w in ws), blocked_events=events,
                         loop_source=probe.loop_source, call_source=probe.call_source,
                         untimed=probe.untimed, durability=durability(ws), cross_check=cross, sampled=_sampled(ws),
                         sampled_rse={c: max((w.probe.sampled_rse or {}).get(c, 0.0) for w in ws)
                                      for c in {c for w in ws for c in (w.probe.sampled_rse or {})}},
                         server_exits=sum(1 for w in ws if w.server_exit))


def _from_schedstat(main_off: dict, t: ThreadRecord, window_ns: int) -> None:
    """The main thread's off-CPU parts when no switch was traced (record --attach): its wait for a CPU is the
    kernel's run-queue time; its blocked time goes to its timed fsync and AOF-write calls as far as they reach,
    the rest to other (idle in epoll_wait and other blocking are not told apart without the switches)."""
    s = t.sched
    if s is None:
        return
    blocked = max(0.0, window_ns - s.on_cpu_ns - s.runqueue_ns)
    main_off["other"]["runnable"] += s.runqueue_ns
    for call in ("fdatasync", "fsync", "aof_write"):
        rec = t.calls.get(call)
        part = min(blocked, float(rec.sum_ns or 0)) if rec is not None else 0.0
        main_off[call]["io"] += part
        blocked -= part
    main_off["other"]["sleeping"] += blocked


def _main_thread(ws: list[ServerWindow], main_calls: dict, main_off: dict, wall_ns: int,
                 on_cpu_measured: bool) -> MainThread:
    loop = main_calls["loop_iteration"]
    # the server's own count (INFO eventloop_cycles) when every window has it: the eBPF backend
    # probes beforeSleep for a sample of the time only, so its histogram is a sample
    counted = [w.eventloop for w in ws if w.eventloop]
    if len(counted) == len(ws):
        iterations = sum(e.cycles for e in counted)
        mean_us = sum(e.duration_us for e in counted) / iterations if iterations else None
        iterations_counted = True
    else:
        iterations, mean_us = loop.count, (loop.sum_ns / loop.count / 1e3 if loop.count else None)
        # the shim sees every iteration (epoll_wait returns); the eBPF uprobe a sample of them
        iterations_counted = bool(loop.count) and str(ws[0].probe.loop_source).startswith("shim")
    fds, flush = main_calls["fdatasync"], main_calls["aof_flush"]
    p = lambda h, q: float(h.percentile(q)) / 1e3 if h.count else None  # noqa: E731
    return MainThread(wall_ms=wall_ns / 1e6, fdatasync_count=fds.count, fdatasync_p50_us=p(fds, 50),
                      fdatasync_p99_us=p(fds, 99), fsync_count=main_calls["fsync"].count,
                      **budget(main_off, wall_ns), on_cpu_measured=on_cpu_measured,
                      loop_iterations=iterations, loop_iterations_counted=iterations_counted,
                      loop_iteration_p50_us=p(loop, 50), loop_iteration_p99_us=p(loop, 99),
                      loop_iteration_mean_us=mean_us, loop_iterations_sampled=loop.count,
                      loop_iteration_tw_p50_us=loop.time_weighted_percentile(50) / 1e3 if loop.count else None,
                      loop_iterations_per_s=iterations / (wall_ns / 1e9) if wall_ns else None,
                      aof_flushes=flush.count, aof_flush_p50_us=p(flush, 50),
                      off_cpu_ms_by_cause={c: {s: v / 1e6 for s, v in st.items()} for c, st in main_off.items()},
                      stalls=main_stalls(ws), sync_on_cpu_pct=_sync_on_cpu_pct(main_calls, main_off, wall_ns))


def _sync_on_cpu_pct(calls: dict, off: dict, wall_ns: float) -> float | None:
    """The main thread's time on CPU inside its fdatasync/fsync calls (their length less their off-CPU
    time), as a share of the window; None without the calls' off-CPU figures (the shim)."""
    total = sum(calls[c].sum_ns for c in SYNC_CALLS if calls[c].count)
    if not total or not wall_ns or not any(off.get(c) for c in SYNC_CALLS):
        return None
    blocked = sum(sum(off.get(c, {}).values()) for c in SYNC_CALLS)
    return max(0.0, 100.0 * (total - blocked) / wall_ns)


def stall_class(cause: str, state: str) -> str | None:
    """Which part of the main thread's budget an off-CPU interval (part) is: a wait for a CPU when
    runnable, else by the call it was in; None for idle (epoll_wait) and whole-call events."""
    if state == "call":
        return None
    if state == "runnable":
        return "cpu_wait"
    if cause in SYNC_CALLS:
        return "fsync"
    if cause == "aof_write":
        return "aof_write"
    return None if cause == "epoll_wait" else "other_blocked"


def main_stalls(raws: list) -> Stalls | None:
    """The main thread's long off-CPU intervals (the blocked timeline: each part at least its
    threshold) by budget class, over windows that all have a timeline (None otherwise: the shim
    records none). What a request arriving at random meets of them is their residual, sum(W^2) / 2
    per unit of wall time (analysis/model.py)."""
    ws = _windows(raws)
    if not ws or any(w.blocked_timeline.threshold_ns is None for w in ws):
        return None
    out = Stalls(threshold_ms=(ws[0].blocked_timeline.threshold_ns or 0) / 1e6)
    for w in ws:
        main_tid = w.main_tid or w.pid
        for start, dur, tid, cause, state in w.blocked_timeline.events:
            cls = stall_class(cause, state) if tid == main_tid else None
            part = (min(start + dur, w.window_ns) - max(start, 0)) / 1e6 if cls else 0  # the part inside the window
            if not cls or part <= 0:
                continue
            o = getattr(out, cls)
            o.count += 1
            o.sum_ms += part
            o.sum_sq_ms2 += part * part
            o.max_ms = max(o.max_ms, part)
    return out


def cross_check(ebpf_main: MainThread, shim_main: MainThread) -> BackendCounts:
    """Main-thread fdatasync as each backend counted it, and how far apart the counts are."""
    a, b = ebpf_main.fdatasync_count, shim_main.fdatasync_count
    return BackendCounts(a, b, ebpf_main.fdatasync_p50_us, shim_main.fdatasync_p50_us,
                         100.0 * abs(a - b) / max(a, b) if max(a, b) else 0.0)


# a window at least this long under appendfsync everysec holds at least one fsync (the server
# fsyncs about once a second while it writes the AOF); shorter ones may fall between two
MIN_EVERYSEC_WINDOW_S = 2.5


def sync_blocked_ns(thread) -> float:
    """ns one raw thread spent blocked inside fsync/fdatasync in the window, whether the call
    completed in it or not (the off-CPU intervals, not the call histograms)."""
    t = decode_as(thread, ThreadRecord)
    return sum(v for cause, by_state in t.off_cpu_ns.items() if cause in SYNC_CALLS
               for state, v in by_state.items() if state != "runnable")


def _count(t: ThreadRecord, kinds) -> int:
    return sum(t.calls[k].count for k in kinds if k in t.calls)


def _where(run: Run) -> dict:
    """The run a warning names, as its figures."""
    return {"workload": run.workload, "value_size": run.value_size, "repeat": run.repeat}


def _ok_windows(doc: Document):
    """(run, its window) of every finished run with a server-side trace."""
    return [(r, r.server) for r in doc.runs if r.status == "ok" and r.server and r.server.threads]


def missed_fsyncs(doc) -> list[Note]:
    """Windows in which the AOF was written but the tracer saw no fsync on any thread, although
    the server's appendfsync implies some: under `always` every write is followed by one, under
    `everysec` one a second. A missed probe (or a server that did not fsync) said, not hidden in
    the medians: one warning per such window."""
    doc = decode(doc)
    mode = doc.server.appendfsync
    if mode not in ("always", "everysec"):
        return []
    out = []
    for run, srv in _ok_windows(doc):
        writes = sum(_count(t, ("aof_write",)) for t in srv.threads)
        syncs = sum(_count(t, SYNC_CALLS) for t in srv.threads)
        window_s = srv.window_ns / 1e9
        expected = writes >= 10 if mode == "always" else writes > 0 and window_s >= MIN_EVERYSEC_WINDOW_S
        if expected and syncs == 0 and any(sync_blocked_ns(t) for t in srv.threads):
            continue  # an fsync ran across the window (explain.fsync_placement says so): not missed
        if expected and syncs == 0:
            out.append(Note("missed_fsync", dict(_where(run), window_s=window_s, aof_writes=writes,
                                                 appendfsync=mode)))
    return out


TRUTH_TOLERANCE = 0.10  # the tracer's figure may differ from the kernel's by this share ...
TRUTH_FLOOR_OF_WALL = 0.01  # ... or by this share of the wall time, whichever is larger
BACKENDS_TOLERANCE = 0.02  # --backend both: call counts per role may differ by this share


def _own_figures(t: ThreadRecord, window_ns: int) -> tuple[float, float] | None:
    """(on-CPU ns, run-queue ns) of one raw thread by the tracer's own off-CPU intervals, or None
    when it recorded none (the figures then are the kernel's: nothing to compare)."""
    if not t.off_cpu_ns:
        return None
    off = sum(v for st in t.off_cpu_ns.values() for v in st.values())
    rq = sum(v for st in t.off_cpu_ns.values() for s, v in st.items() if s == "runnable")
    return window_ns - off, rq


def server_steal_ns(doc, run) -> float | None:
    """The hypervisor's steal on the server's CPUs during the run's window (ns), or None when the
    recording has no per-CPU steal (made before it was kept)."""
    doc, run = decode(doc), decode_as(run, Run)
    steal = run.host_cpu.steal_ms_by_cpu if run.host_cpu else None
    if steal is None:
        return None
    cpus = doc.client.placement.server_cpus or range(len(steal))
    return 1e6 * sum(steal[c] for c in cpus if c < len(steal))


def schedstat_disagreements(doc) -> list[Note]:
    """The eBPF backend against the kernel's own accounting (/proc schedstat), per thread role
    over the recording's windows: a warning for each role whose on-CPU or run-queue time differs
    by more than TRUTH_TOLERANCE (or TRUTH_FLOOR_OF_WALL of its wall time). On-CPU time by the
    switches includes what the hypervisor stole from the thread's CPU while it ran, which the
    kernel does not charge (PARAVIRT_TIME_ACCOUNTING): up to the steal on the server's CPUs, an
    excess is that, not a tracer fault."""
    doc = decode(doc)
    sums: dict[str, list[float]] = {}
    for run, srv in _ok_windows(doc):
        if srv.backend != "ebpf":
            continue
        steal = server_steal_ns(doc, run) or 0.0
        for t in srv.threads:
            own = _own_figures(t, srv.window_ns)
            if own is None or not t.sched:
                continue
            acc = sums.setdefault(role_of(t, srv), [0.0] * 6)
            for i, v in enumerate((own[0], t.sched.on_cpu_ns, own[1], t.sched.runqueue_ns, srv.window_ns, steal)):
                acc[i] += v
    out = []
    for role, (on, k_on, rq, k_rq, wall, steal) in sums.items():
        for what, ours, kernel, allowed in (("on_cpu", on, k_on, steal), ("runqueue", rq, k_rq, 0.0)):
            tol = max(TRUTH_TOLERANCE * kernel, TRUTH_FLOOR_OF_WALL * wall)
            if not -tol <= ours - kernel <= allowed + tol:
                out.append(Note("schedstat", {"role": role, "measure": what, "ebpf_ms": ours / 1e6,
                                              "kernel_ms": kernel / 1e6, "window_s": wall / 1e9,
                                              "steal_ms": allowed / 1e6}))
    return out


def backend_disagreements(doc) -> list[Note]:
    """--backend both: per thread role, fsync and AOF-write counts as eBPF and the shim counted
    them over the recording; a warning for each that differs by more than BACKENDS_TOLERANCE."""
    doc = decode(doc)
    counts: dict[tuple[str, str], list[int]] = {}
    for _, srv in _ok_windows(doc):
        if not srv.shim:
            continue
        for i, side in enumerate((srv, srv.shim)):
            for t in side.threads:
                for what, kinds in (("fsync", SYNC_CALLS), ("aof_write", ("aof_write",))):
                    counts.setdefault((role_of(t, side), what), [0, 0])[i] += _count(t, kinds)
    out = []
    for (role, what), (ebpf, shim) in sorted(counts.items()):
        if max(ebpf, shim) and abs(ebpf - shim) > BACKENDS_TOLERANCE * max(ebpf, shim):
            out.append(Note("backends", {"role": role, "call": what, "ebpf": ebpf, "shim": shim}))
    return out


STALL_WARN_MS = 100.0  # a main-thread interval outside every timed call this long is a stall


def stalls(doc) -> list[Note]:
    """The main thread stopped outside any fsync, AOF write or poll (DEBUG SLEEP, SIGSTOP, a page-fault
    storm): one warning per cell with such an interval, with the longest's length; a stall is said as
    such, not read as a slow disk or a wait for a CPU."""
    out = []
    for r in decode(doc).runs:
        if not r.server:
            continue
        main = r.server.main_tid or r.server.pid
        long = [e[1] / 1e6 for e in r.server.blocked_timeline.events
                if e[2] == main and e[3] == "other" and e[4] in ("sleeping", "io") and e[1] / 1e6 >= STALL_WARN_MS]
        if long:
            out.append(Note("stall", dict(_where(r), intervals=len(long), threshold_ms=STALL_WARN_MS,
                                          longest_ms=max(long))))
    return out
