"""The shim backend: the LD_PRELOAD library (csrc/shim.c), read through its shared-memory region
(tracers/region.py).

Needs no privileges: valkeytrace creates the region (a 0600 file in /dev/shm), launches the
server with LD_PRELOAD and $VALKEYTRACE_SHM, and reads the region through the _native module
(bounds-checked in C). Off-CPU time comes from /proc/PID/task/TID/schedstat (on-CPU and
run-queue time per thread); the time inside fsync/fdatasync, AOF writes and epoll_wait, as the
shim measures it, stands in for blocked time by cause.

The same library injects an emulated fsync delay ($VALKEYTRACE_FSYNC_DELAY), with either
backend: with ebpf it is loaded for the injection only (tracers/emulation.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from valkeytrace import roles
from valkeytrace.errors import VTError
from valkeytrace.recording import document
from valkeytrace.server import threads as thr
from valkeytrace.tracers.base import Tracer
from valkeytrace.tracers.emulation import preload_env, shim_library
from valkeytrace.tracers.region import ShimRegion, SlotReading
from valkeytrace.tracers.windows import histogram_delta


class ShimTracer(Tracer):
    """--backend shim: launch-time preload; window metrics in the same raw shape as ebpf."""

    name = "shim"

    def __init__(self, inject: dict | None = None, socket_writes: bool = False):
        self.inject = inject
        self.library = shim_library()
        self.region = ShimRegion(inject["median_ns"] if inject else 0)
        # socket writes are most of the calls under a GET load (one per reply, ~33K/s here, ~70 ns
        # each timed): timed only when asked, as with the eBPF backend (its syscalls group)
        self.region.set_untimed(() if socket_writes else ("socket_write",))
        self.pid: Any = None
        self.loop_reliable = True
        self._begin: Any = None

    def launch_env(self) -> dict:
        return preload_env(self.library, self.region.path, self.inject)

    def chown_region(self, uid: int, gid: int):
        self.region.chown(uid, gid)

    def set_extra_fsync_delay(self, ns: int):
        self.region.set_extra_delay(ns)

    def start_paused(self, target):
        self.start(target)
        self.region.set_paused(True)

    def resume(self, target):
        self.region.set_paused(False)

    def pause(self, target):
        self.region.set_paused(True)

    def start(self, target):
        self.pid = target.pid
        # the shim sees loop iterations only as the main thread's epoll_wait returns; with I/O
        # threads valkey hands the wait to an I/O thread, so that count means nothing then
        io_threads = target.describe().get("io_threads") or 1
        self.loop_reliable = io_threads <= 1
        if self.region.mapped_pid != target.pid:
            raise VTError("the shim did not load into the server (no LD_PRELOAD effect: a static or "
                          "setuid binary?); use --backend ebpf")

    def stop(self):
        self.region.close()

    def _snap(self, mono_ns: int | None = None) -> ShimSnapshot:
        names = thr.list_threads(self.pid)
        return ShimSnapshot(mono_ns or time.monotonic_ns(), self.region.snapshot(), names,
                            thr.schedstats(self.pid, names), self.region.dropped_calls)

    def window_begin(self, requests: bool = False, observe: bool = False):
        self._begin = self._snap()

    def window_end(self, end_mono_ns: int | None = None) -> dict:
        if end_mono_ns is not None:  # a server that ended just as the window opened: an empty window
            end_mono_ns = max(end_mono_ns, self._begin.mono_ns)
        return shim_window_metrics(self._begin, self._snap(end_mono_ns), self.pid, self.inject,
                                   loop_reliable=self.loop_reliable, untimed=self.region.untimed)


@dataclass
class ShimSnapshot:
    """The region and the threads' schedstat at one moment (a window's edge)."""
    mono_ns: int
    slots: dict[int, SlotReading]
    names: dict[int, str]
    sched: dict
    dropped: int


def shim_window_metrics(a: ShimSnapshot, b: ShimSnapshot, pid: int, inject: dict | None, loop_reliable: bool = True,
                        untimed: tuple | list = ()) -> dict:
    wall = b.mono_ns - a.mono_ns
    threads = []
    names = {**a.names, **b.names}
    for tid in sorted(set(names) | set(b.slots)):
        sb, sa = b.slots.get(tid), a.slots.get(tid) or SlotReading("?", {}, {})
        name = names.get(tid) or (sb.name if sb is not None else "?")
        entry = document.thread_record(tid, name, roles.thread_role(tid, pid, name))
        call_ns = {}
        if sb is not None:
            for kind, (counts, sum_ns, max_ns) in sb.kinds.items():
                if kind == "loop_iteration" and not loop_reliable:
                    continue
                c0, s0, _ = sa.kinds.get(kind, (0, 0, 0))
                rec = histogram_delta(counts, c0, sum_ns, s0, max_ns, sb.bytes.get(kind, 0) - sa.bytes.get(kind, 0))
                if rec is not None:
                    entry["calls"][kind] = rec
                    call_ns[kind] = rec["sum_ns"]
            entry["injected_ns"] = sb.injected_ns - sa.injected_ns
        sched = thr.sched_delta(a.sched, b.sched, tid)
        if sched:
            entry["sched"] = sched
            on_cpu, rq = sched["on_cpu_ns"], sched["runqueue_ns"]
            blocked = max(0, wall - on_cpu - rq)
            off = {"other": {"runnable": rq}}
            # time inside the calls stands in for blocked time by cause, capped by what is left
            for kind, state in (("fdatasync", "io"), ("fsync", "io"), ("aof_write", "io"), ("epoll_wait", "sleeping")):
                take = min(call_ns.get(kind, 0), blocked)
                if take:
                    off.setdefault(kind, {})[state] = take
                    blocked -= take
            if blocked:
                off["other"]["sleeping"] = blocked
            entry["off_cpu_ns"] = off
        threads.append(entry)
    return document.server_window(
        backend="shim", window_ns=wall, pid=pid, threads=threads, lost_events=b.dropped - a.dropped,
        blocked_timeline={"threshold_ns": None, "events": []},
        probe={"loop_source": "shim:epoll_wait" if loop_reliable else None, "inject": inject, "untimed": list(untimed),
               **({} if loop_reliable else {"loop_note": "not measured: with I/O threads the main thread does not "
                                                         "wait in epoll_wait each iteration"})})
