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

from valkeytrace.histogram import LatencyHistogram
from valkeytrace.analysis.durability import durability
from valkeytrace.analysis.summary import (BUDGET, SYNC_CALLS, TIMED_CALLS, CallStats, CrossCheck, MainThread,
                                          ServerSummary, ThreadRole, budget_category)
from valkeytrace.roles import ROLES, thread_role

CALLS = TIMED_CALLS


def _hist(rec: dict | None) -> LatencyHistogram:
    return LatencyHistogram.from_dict(rec) if rec else LatencyHistogram()


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


def summarize_server(raws: list[dict]) -> ServerSummary | None:
    """Merge the raw `server` dicts of a cell's repeats into the report's server summary."""
    raws = [r for r in raws if r]
    if not raws:
        return None
    wall_ns = sum(r["window_ns"] for r in raws)
    main_calls: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
    main_off: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    roles: dict[str, dict] = {}
    # without scheduler data (the shim where /proc has no schedstat), "on CPU" is only "not in a
    # timed call": reports say so
    on_cpu_measured = any("sched" in ((raw.get("probe") or {}).get("probe_groups") or ()) for raw in raws)
    for raw in raws:
        main_tid = raw.get("main_tid") or raw.get("pid")
        for t in raw["threads"]:
            # from the name, by today's table (recordings keep the role they were made with)
            role = thread_role(t["tid"], main_tid, t["name"]) if t.get("name") and main_tid else t["role"]
            r = roles.setdefault(role, {"names": set(), "tids": set(), "calls": defaultdict(LatencyHistogram),
                                        "bytes": defaultdict(int), "off_cpu_ns": defaultdict(float),
                                        "in_sync_ns": 0.0, "sched_ns": defaultdict(float), "sched_windows": 0,
                                        "windows": 0, "wall_ns": 0})
            r["in_sync_ns"] += sync_blocked_ns(t)
            r["names"].add(t["name"])
            r["tids"].add(t["tid"])
            for call, rec in t.get("calls", {}).items():
                r["calls"][call].merge(_hist(rec))
                r["bytes"][call] += rec.get("bytes") or 0
                if role == "main":
                    main_calls[call].merge(_hist(rec))
            sched = t.get("sched")
            on_cpu_measured = on_cpu_measured or bool(sched and role == "main")
            own = t.get("off_cpu_ns") or {}
            if sched:  # the kernel's own figures, kept beside the tracer's
                r["sched_ns"]["on_cpu"] += sched["on_cpu_ns"]
                r["sched_ns"]["runqueue"] += sched["runqueue_ns"]
                r["sched_windows"] += 1
            if sched and not own:  # no switch seen in the window (or the shim): the kernel's accounting
                r["off_cpu_ns"]["runnable"] += sched["runqueue_ns"]
                r["off_cpu_ns"]["blocked"] += max(0, raw["window_ns"] - sched["on_cpu_ns"] - sched["runqueue_ns"])
            r["windows"] += 1
            r["wall_ns"] += raw["window_ns"]
            for cause, by_state in own.items():
                for state, v in by_state.items():
                    r["off_cpu_ns"][state] += v
                    if role == "main":
                        main_off[cause][state] += v
    loop = main_calls["loop_iteration"]
    # the server's own count (INFO eventloop_cycles) when every window has it: the eBPF backend
    # probes beforeSleep for a sample of the time only, so its histogram is a sample
    counted = [r["eventloop"] for r in raws if r.get("eventloop")]
    if len(counted) == len(raws):
        iterations = sum(e["cycles"] for e in counted)
        mean_us = sum(e["duration_us"] for e in counted) / iterations if iterations else None
        iterations_counted = True
    else:
        iterations, mean_us = loop.count, (loop.sum_ns / loop.count / 1e3 if loop.count else None)
        # the shim sees every iteration (epoll_wait returns); the eBPF uprobe a sample of them
        iterations_counted = bool(loop.count) and str(raws[0].get("probe", {}).get("loop_source")).startswith("shim")
    fds, flush = main_calls["fdatasync"], main_calls["aof_flush"]
    p = lambda h, q: float(h.percentile(q)) / 1e3 if h.count else None  # noqa: E731
    main = MainThread(wall_ms=wall_ns / 1e6, fdatasync_count=fds.count, fdatasync_p50_us=p(fds, 50),
                      fdatasync_p99_us=p(fds, 99), fsync_count=main_calls["fsync"].count,
                      **budget(main_off, wall_ns), on_cpu_measured=on_cpu_measured,
                      loop_iterations=iterations, loop_iterations_counted=iterations_counted,
                      loop_iteration_p50_us=p(loop, 50), loop_iteration_p99_us=p(loop, 99),
                      loop_iteration_mean_us=mean_us, loop_iterations_sampled=loop.count,
                      loop_iteration_tw_p50_us=loop.time_weighted_percentile(50) / 1e3 if loop.count else None,
                      loop_iterations_per_s=iterations / (wall_ns / 1e9) if wall_ns else None,
                      aof_flushes=flush.count, aof_flush_p50_us=p(flush, 50),
                      off_cpu_ms_by_cause={c: {s: v / 1e6 for s, v in st.items()} for c, st in main_off.items()},
                      stalls=main_stalls(raws), sync_on_cpu_pct=_sync_on_cpu_pct(main_calls, main_off, wall_ns))
    threads = []
    for role in sorted(roles, key=lambda x: ROLES.index(x) if x in ROLES else len(ROLES)):
        r = roles[role]
        th = ThreadRole(role=role, names=sorted(r["names"]), threads=len(r["tids"]),
                        **{call: call_summary(r["calls"][call], r["bytes"][call]) for call in CALLS})
        th.off_cpu_ms = sum(r["off_cpu_ns"].values()) / 1e6
        th.off_cpu_ms_by_state = {s: v / 1e6 for s, v in r["off_cpu_ns"].items()}
        # the kernel's own accounting (/proc/PID/task/TID/schedstat) over the same windows, when
        # every window of every thread of the role has it
        th.schedstat = ({"on_cpu_ms": r["sched_ns"]["on_cpu"] / 1e6, "runqueue_ms": r["sched_ns"]["runqueue"] / 1e6}
                        if r["windows"] and r["sched_windows"] == r["windows"] else None)
        th.wall_ms = r["wall_ns"] / 1e6 / max(1, len(r["tids"]))
        # the role's thread time: each of its threads over each window it was in (launches apart:
        # a role's threads of two launches are two tids, each there half the time)
        th.thread_wall_ms = r["wall_ns"] / 1e6
        th.threads_per_window = round(r["windows"] / len(raws), 2)
        # an fsync still in flight at a window's end is in no histogram yet, but its blocked time is
        th.blocked_in_sync_ms = r["in_sync_ns"] / 1e6
        threads.append(th)
    events = sum(1 for r in raws for e in r.get("blocked_timeline", {}).get("events", []) if e[-1] != "call")
    cross = None
    shim_raws = [r["shim"] for r in raws if r.get("shim")]
    if shim_raws:
        shim = summarize_server(shim_raws)
        cross = CrossCheck(shim.main_thread, shim.threads, cross_check(main, shim.main_thread))
    probe = raws[0].get("probe", {})
    return ServerSummary(backend=raws[0].get("backend"), windows=len(raws), main_thread=main, threads=threads,
                         lost_events=sum(r.get("lost_events") or 0 for r in raws), blocked_events=events,
                         loop_source=probe.get("loop_source"), call_source=probe.get("call_source"),
                         untimed=probe.get("untimed", []), durability=durability(raws), cross_check=cross,
                         server_exits=sum(1 for r in raws if r.get("server_exit")))


def _sync_on_cpu_pct(calls: dict, off: dict, wall_ns: float) -> float | None:
    """The main thread's time on CPU inside its fdatasync/fsync calls (their length less their off-CPU
    time), as a share of the window; None without the calls' off-CPU figures (the shim)."""
    total = sum(calls[c].sum_ns for c in SYNC_CALLS if calls[c].count)
    if not total or not wall_ns or not any(off.get(c) for c in SYNC_CALLS):
        return None
    blocked = sum(sum(off.get(c, {}).values()) for c in SYNC_CALLS)
    return max(0.0, 100.0 * (total - blocked) / wall_ns)


STALL_CLASSES = ("fsync", "aof_write", "cpu_wait", "other_blocked")


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


def main_stalls(raws: list[dict]) -> dict | None:
    """The main thread's long off-CPU intervals (the blocked timeline: each part at least its
    threshold) by budget class: {class: {"count", "sum_ms", "sum_sq_ms2", "max_ms"}}, over windows
    that all have a timeline (None otherwise: the shim records none). What a request arriving at
    random meets of them is their residual, sum(W^2) / 2 per unit of wall time (analysis/model.py)."""
    def threshold(r):
        t = (r.get("blocked_timeline") or {}).get("threshold_ns")
        return t if isinstance(t, (int, float)) and not isinstance(t, bool) else None

    if not raws or any(threshold(r) is None for r in raws):
        return None
    out = {c: {"count": 0, "sum_ms": 0.0, "sum_sq_ms2": 0.0, "max_ms": 0.0} for c in STALL_CLASSES}
    for r in raws:
        main_tid = r.get("main_tid") or r.get("pid")
        wall = r["window_ns"]
        for row in r["blocked_timeline"].get("events") or ():
            try:
                start, dur, tid, cause, state = row
                cls = stall_class(cause, state) if tid == main_tid else None
                w = (min(start + dur, wall) - max(start, 0)) / 1e6 if cls else 0  # the part inside the window
            except (TypeError, ValueError):
                continue  # a row the schema let through that is not one: not a stall
            if not cls:
                continue
            if w <= 0:
                continue
            o = out[cls]
            o["count"] += 1
            o["sum_ms"] += w
            o["sum_sq_ms2"] += w * w
            o["max_ms"] = max(o["max_ms"], w)
    out["threshold_ms"] = threshold(raws[0]) / 1e6
    return out


def cross_check(ebpf_main: MainThread, shim_main: MainThread) -> dict:
    """Main-thread fdatasync as each backend counted it, and how far apart the counts are."""
    a, b = ebpf_main.fdatasync_count, shim_main.fdatasync_count
    return {"ebpf_count": a, "shim_count": b, "ebpf_p50_us": ebpf_main.fdatasync_p50_us,
            "shim_p50_us": shim_main.fdatasync_p50_us,
            "count_diff_pct": 100.0 * abs(a - b) / max(a, b) if max(a, b) else 0.0}


# a window at least this long under appendfsync everysec holds at least one fsync (the server
# fsyncs about once a second while it writes the AOF); shorter ones may fall between two
MIN_EVERYSEC_WINDOW_S = 2.5


def sync_blocked_ns(thread: dict) -> float:
    """ns one raw thread spent blocked inside fsync/fdatasync in the window, whether the call
    completed in it or not (the off-CPU intervals, not the call histograms)."""
    return sum(v for cause, by_state in (thread.get("off_cpu_ns") or {}).items() if cause in SYNC_CALLS
               for state, v in by_state.items() if state != "runnable")


def missed_fsyncs(doc: dict) -> list[str]:
    """Windows in which the AOF was written but the tracer saw no fsync on any thread, although
    the server's appendfsync implies some: under `always` every write is followed by one, under
    `everysec` one a second. A missed probe (or a server that did not fsync) said, not hidden in
    the medians: one sentence per such window."""
    mode = (doc.get("server") or {}).get("appendfsync")
    if mode not in ("always", "everysec"):
        return []
    out = []
    for run in doc.get("runs", []):
        srv = run.get("server")
        if run.get("status") != "ok" or not srv or not srv.get("threads"):
            continue
        calls = [t.get("calls") or {} for t in srv["threads"]]
        writes = sum((c.get("aof_write") or {}).get("count", 0) for c in calls)
        syncs = sum((c.get(k) or {}).get("count", 0) for c in calls for k in SYNC_CALLS)
        window_s = srv["window_ns"] / 1e9
        expected = writes >= 10 if mode == "always" else writes > 0 and window_s >= MIN_EVERYSEC_WINDOW_S
        if expected and syncs == 0 and any(sync_blocked_ns(t) for t in srv["threads"]):
            continue  # an fsync ran across the window (explain.fsync_placement says so): not missed
        if expected and syncs == 0:
            out.append(f"{run['workload']} {run['value_size']} B #{run.get('repeat')}: no fsync seen on any thread "
                       f"in a {window_s:.1f} s window with {writes:,} AOF writes under appendfsync {mode} "
                       f"(the server fsyncs {'after each write' if mode == 'always' else 'about once a second'}): "
                       "a probe missed them, or the server did not fsync; this window's fsync figures are not "
                       "to be trusted")
    return out


TRUTH_TOLERANCE = 0.10  # the tracer's figure may differ from the kernel's by this share ...
TRUTH_FLOOR_OF_WALL = 0.01  # ... or by this share of the wall time, whichever is larger
BACKENDS_TOLERANCE = 0.02  # --backend both: call counts per role may differ by this share


def _own_figures(thread: dict, window_ns: int) -> tuple[float, float] | None:
    """(on-CPU ns, run-queue ns) of one raw thread by the tracer's own off-CPU intervals, or None
    when it recorded none (the figures then are the kernel's: nothing to compare)."""
    own = thread.get("off_cpu_ns") or {}
    if not own:
        return None
    off = sum(v for st in own.values() for v in st.values())
    rq = sum(v for st in own.values() for s, v in st.items() if s == "runnable")
    return window_ns - off, rq


def server_steal_ns(doc: dict, run: dict) -> float | None:
    """The hypervisor's steal on the server's CPUs during the run's window (ns), or None when the
    recording has no per-CPU steal (made before it was kept)."""
    steal = (run.get("host_cpu") or {}).get("steal_ms_by_cpu")
    if steal is None:
        return None
    cpus = ((doc.get("client") or {}).get("placement") or {}).get("server_cpus") or range(len(steal))
    return 1e6 * sum(steal[c] for c in cpus if c < len(steal))


def schedstat_disagreements(doc: dict) -> list[str]:
    """The eBPF backend against the kernel's own accounting (/proc schedstat), per thread role
    over the recording's windows: a sentence for each role whose on-CPU or run-queue time differs
    by more than TRUTH_TOLERANCE (or TRUTH_FLOOR_OF_WALL of its wall time). On-CPU time by the
    switches includes what the hypervisor stole from the thread's CPU while it ran, which the
    kernel does not charge (PARAVIRT_TIME_ACCOUNTING): up to the steal on the server's CPUs, an
    excess is that, not a tracer fault."""
    sums: dict[str, list[float]] = {}
    for run in doc.get("runs", []):
        srv = run.get("server")
        if run.get("status") != "ok" or not srv or srv.get("backend") != "ebpf":
            continue
        main_tid = srv.get("main_tid") or srv.get("pid")
        steal = server_steal_ns(doc, run) or 0.0
        for t in srv.get("threads") or ():
            own, sched = _own_figures(t, srv["window_ns"]), t.get("sched")
            if own is None or not sched:
                continue
            role = thread_role(t["tid"], main_tid, t["name"]) if t.get("name") and main_tid else t["role"]
            acc = sums.setdefault(role, [0.0] * 6)
            for i, v in enumerate((own[0], sched["on_cpu_ns"], own[1], sched["runqueue_ns"], srv["window_ns"], steal)):
                acc[i] += v
    out = []
    for role, (on, k_on, rq, k_rq, wall, steal) in sums.items():
        for what, ours, kernel, allowed in (("on-CPU", on, k_on, steal), ("run-queue (waiting for a CPU)", rq, k_rq, 0.0)):
            tol = max(TRUTH_TOLERANCE * kernel, TRUTH_FLOOR_OF_WALL * wall)
            if not -tol <= ours - kernel <= allowed + tol:
                stolen = f" (the hypervisor's steal on the server's CPUs, {allowed / 1e6:,.1f} ms, does not account " \
                         "for it)" if allowed else ""
                out.append(f"{role}: {what} time {ours / 1e6:,.1f} ms by eBPF, {kernel / 1e6:,.1f} ms by the kernel's "
                           f"schedstat over {wall / 1e9:.1f} s of windows{stolen}: the tracer missed or misplaced "
                           "scheduler events; this role's time budget is not to be trusted")
    return out


def backend_disagreements(doc: dict) -> list[str]:
    """--backend both: per thread role, fsync and AOF-write counts as eBPF and the shim counted
    them over the recording; a sentence for each that differs by more than BACKENDS_TOLERANCE."""
    counts: dict[tuple[str, str], list[int]] = {}
    for run in doc.get("runs", []):
        srv = run.get("server")
        if run.get("status") != "ok" or not srv or not srv.get("shim"):
            continue
        for i, side in enumerate((srv, srv["shim"])):
            main_tid = side.get("main_tid") or side.get("pid")
            for t in side.get("threads") or ():
                role = thread_role(t["tid"], main_tid, t["name"]) if t.get("name") and main_tid else t["role"]
                calls = t.get("calls") or {}
                for what, kinds in (("fsync", SYNC_CALLS), ("AOF write", ("aof_write",))):
                    n = sum((calls.get(k) or {}).get("count", 0) for k in kinds)
                    counts.setdefault((role, what), [0, 0])[i] += n
    out = []
    for (role, what), (ebpf, shim) in sorted(counts.items()):
        if max(ebpf, shim) and abs(ebpf - shim) > BACKENDS_TOLERANCE * max(ebpf, shim):
            out.append(f"{role}: {ebpf:,} {what} calls by eBPF, {shim:,} by the shim (--backend both): the backends "
                       f"disagree by {100 * abs(ebpf - shim) / max(ebpf, shim):.0f}%")
    return out


STALL_WARN_MS = 100.0  # a main-thread interval outside every timed call this long is a stall


def stalls(doc: dict) -> list[str]:
    """The main thread stopped outside any fsync, AOF write or poll (DEBUG SLEEP, SIGSTOP, a page-fault
    storm): one sentence per cell with such an interval, with the longest's length; a stall is said as
    such, not read as a slow disk or a wait for a CPU."""
    out = []
    for r in doc.get("runs", []):
        s = r.get("server") or {}
        main = s.get("main_tid") or s.get("pid")
        longest, n = 0.0, 0
        for e in (s.get("blocked_timeline") or {}).get("events") or ():
            if e[2] == main and e[3] == "other" and e[4] in ("sleeping", "io") and e[1] / 1e6 >= STALL_WARN_MS:
                n += 1
                longest = max(longest, e[1] / 1e6)
        if n:
            out.append(f"the main thread stalled in {r['workload']} {r['value_size']} B #{r.get('repeat')}: {n} interval(s) "
                       f"of {STALL_WARN_MS:.0f} ms or more outside any fsync, AOF write or poll, the longest "
                       f"{longest:,.0f} ms (DEBUG SLEEP, SIGSTOP, a page-fault storm...): a stall of the server, "
                       "not a slow disk nor a wait for a CPU")
    return out
