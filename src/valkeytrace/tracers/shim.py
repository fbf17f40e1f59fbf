"""The shim backend: the LD_PRELOAD library (csrc/shim.c) and its shared-memory region.

Needs no privileges: valkeytrace creates the region (a 0600 file in /dev/shm), launches the
server with LD_PRELOAD and $VALKEYTRACE_SHM, and reads the region through the _native module
(bounds-checked in C). Off-CPU time comes from /proc/PID/task/TID/schedstat (on-CPU and
run-queue time per thread); the time inside fsync/fdatasync, AOF writes and epoll_wait, as the
shim measures it, stands in for blocked time by cause.

The same library injects an emulated fsync delay ($VALKEYTRACE_FSYNC_DELAY), with either
backend: with ebpf it is loaded for the injection only.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
from pathlib import Path

import numpy as np

from valkeytrace._native import ffi, lib
from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.layout import CALL_NAMES, HIST_BUCKETS
from valkeytrace.target import threads as thr

SHM_DIR = "/dev/shm"
RECORDED_KINDS = ("fdatasync", "fsync", "aof_write", "socket_write", "epoll_wait", "loop_iteration")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def shim_library() -> str:
    """The built shim, next to the _native module."""
    import valkeytrace._native as native

    here = Path(native.__file__).parent
    found = sorted(here.glob("_shim*.so"))
    if not found:
        raise VTError(f"the shim library is missing from {here}; reinstall valkeytrace (make setup)")
    return str(found[0])


def _duration_ns(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)\s*", text)
    if not m:
        raise ValueError(text)
    return int(round(float(m.group(1)) * _UNITS[m.group(2)]))


def parse_fsync_delay(spec: str) -> dict:
    """'4ms' -> constant; 'lognormal:4ms,0.3' -> lognormal with median 4 ms, sigma 0.3."""
    try:
        if spec.startswith("lognormal:"):
            median, sigma = spec[len("lognormal:"):].split(",")
            ns, sig = _duration_ns(median), float(sigma)
            if ns <= 0 or not 0 <= sig <= 5:
                raise ValueError(spec)
            return {"kind": "lognormal", "median_ns": ns, "sigma": sig, "spec": spec,
                    "env": f"lognormal:{ns},{sig}"}
        ns = _duration_ns(spec[len("const:"):] if spec.startswith("const:") else spec)
        if ns <= 0:
            raise ValueError(spec)
        return {"kind": "const", "median_ns": ns, "sigma": 0.0, "spec": spec, "env": f"const:{ns}"}
    except ValueError:
        raise VTUsageError(f"--inject-fsync-delay {spec!r}: expected a duration like 4ms or 500us, "
                           "or lognormal:MEDIAN,SIGMA (e.g. lognormal:4ms,0.3)") from None


def describe_delay(inject: dict | None) -> str:
    if not inject:
        return ""
    ms = inject["median_ns"] / 1e6
    if inject["kind"] == "const":
        return f"fsync latency emulated: +{ms:g} ms per call"
    return f"fsync latency emulated: +lognormal(median {ms:g} ms, sigma {inject['sigma']:g}) per call"


def parse_sensitivity(spec: str) -> tuple:
    """'1ms,2ms,4ms' -> (1000000, 2000000, 4000000): the added fsync delays, ascending."""
    try:
        levels = sorted({_duration_ns(part) for part in spec.split(",") if part.strip()})
    except ValueError:
        levels = []
    if not levels or levels[0] <= 0:
        raise VTUsageError(f"--fsync-sensitivity {spec!r}: expected added delays like 1ms,2ms,4ms")
    return tuple(levels)


def describe_sensitivity(inject: dict | None, levels: tuple) -> str:
    """describe_delay, plus the added delays of --fsync-sensitivity runs."""
    base = describe_delay(inject)
    if not levels:
        return base
    added = ", ".join(f"+{ns / 1e6:g} ms" for ns in levels)
    extra = f"sensitivity runs add {added} per fsync/fdatasync (intervention, not a measured disk)"
    return f"{base}; {extra}" if base else f"fsync latency: {extra}"


def preload_env(library: str, shm_path: str | None, inject: dict | None) -> dict:
    env = {"LD_PRELOAD": library}
    if shm_path:
        env["VALKEYTRACE_SHM"] = shm_path
    if inject:
        env["VALKEYTRACE_FSYNC_DELAY"] = inject["env"]
    return env


class ShimRegion:
    """The shared-memory file: created 0600 and exclusive, read through _native, removed on close."""

    def __init__(self, inject_delay_ns: int = 0):
        self.size = lib.vt_shim_region_size()
        self.path = os.path.join(SHM_DIR, f"valkeytrace-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, self.size)
            self.mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(fd)
            os.unlink(self.path)
            raise
        os.close(fd)
        self.base = ffi.from_buffer(self.mm)
        if lib.vt_shim_region_init(self.base, self.size, inject_delay_ns) != 0:
            raise VTError("cannot initialise the shim's shared memory")
        self.header = ffi.cast("struct vt_shim_header *", self.base)
        self._slot = ffi.new("struct vt_shim_thread *")

    def chown(self, uid: int, gid: int):
        os.chown(self.path, uid, gid)

    def set_paused(self, paused: bool):
        self.header.paused = 1 if paused else 0

    def set_extra_delay(self, ns: int):
        """Add ns to every fsync/fdatasync from now on (the shim reads it on every call)."""
        self.header.extra_delay_ns = int(ns)

    def set_untimed(self, kinds):
        """Pass these call kinds through untimed (the shim reads the mask on every call)."""
        self.header.untimed = sum(1 << CALL_NAMES.index(k) for k in kinds)

    @property
    def untimed(self) -> list[str]:
        mask = int(self.header.untimed)
        return [kind for i, kind in enumerate(CALL_NAMES) if mask >> i & 1]

    @property
    def mapped_pid(self) -> int:
        return int(self.header.pid)

    @property
    def dropped_calls(self) -> int:
        return int(self.header.dropped_calls)

    def snapshot(self) -> dict:
        """{tid: {"name", "kinds": {kind: (dense counts, sum_ns, max_ns)}, "bytes": {...}, "injected_ns"}}"""
        n = lib.vt_shim_readable_slots(self.base, self.size)
        if n < 0:
            raise VTError("the shim's shared memory is corrupt (bad header)")
        out = {}
        for i in range(n):
            if lib.vt_shim_copy_slot(self.base, self.size, i, self._slot) != 0:
                continue
            s = self._slot
            kinds = {}
            for kind in RECORDED_KINDS:
                k = CALL_NAMES.index(kind)
                h = s.hist[k]
                if h.count:
                    counts = np.frombuffer(ffi.buffer(h.buckets), dtype=np.uint64, count=HIST_BUCKETS).copy()
                    kinds[kind] = (counts, int(h.sum_ns), int(h.max_ns))
            out[int(s.tid)] = {"name": ffi.string(s.name).decode("utf-8", "replace"), "kinds": kinds,
                               "bytes": {kind: int(s.bytes[CALL_NAMES.index(kind)]) for kind in RECORDED_KINDS},
                               "injected_ns": int(s.injected_ns)}
        return out

    @classmethod
    def delay_control(cls) -> "ShimRegion":
        """A region for adding an fsync delay while the server runs (record --fsync-sensitivity)
        under a backend other than the shim: paused, so the shim records nothing into it."""
        region = cls(0)
        region.set_paused(True)
        return region

    def close(self):
        try:
            self.base = self.header = None
            self.mm.close()
        except (BufferError, ValueError):
            pass
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class ShimTracer:
    """--backend shim: launch-time preload; window metrics in the same raw shape as ebpf."""

    name = "shim"

    def __init__(self, inject: dict | None = None, socket_writes: bool = False):
        self.inject = inject
        self.library = shim_library()
        self.region = ShimRegion(inject["median_ns"] if inject else 0)
        # socket writes are most of the calls under a GET load (one per reply, ~33K/s here, ~70 ns
        # each timed): timed only when asked, as with the eBPF backend (its syscalls group)
        self.region.set_untimed(() if socket_writes else ("socket_write",))

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

    def _snap(self):
        import time

        names = thr.list_threads(self.pid)
        return {"mono_ns": time.monotonic_ns(), "slots": self.region.snapshot(), "names": names,
                "sched": thr.schedstats(self.pid, names),
                "dropped": self.region.dropped_calls}

    def window_begin(self):
        self._begin = self._snap()

    def window_end(self) -> dict:
        return shim_window_metrics(self._begin, self._snap(), self.pid, self.inject,
                                   loop_reliable=getattr(self, "loop_reliable", True), untimed=self.region.untimed)


def shim_window_metrics(a: dict, b: dict, pid: int, inject: dict | None, loop_reliable: bool = True,
                        untimed: tuple = ()) -> dict:
    wall = b["mono_ns"] - a["mono_ns"]
    threads = []
    names = {**a["names"], **b["names"]}
    for tid in sorted(set(names) | set(b["slots"])):
        sb, sa = b["slots"].get(tid), a["slots"].get(tid, {"kinds": {}, "bytes": {}, "injected_ns": 0})
        name = names.get(tid) or (sb or {}).get("name", "?")
        entry = {"tid": tid, "name": name, "role": thr.thread_role(tid, pid, name), "calls": {}, "off_cpu_ns": {}}
        call_ns = {}
        if sb:
            for kind, (counts, sum_ns, max_ns) in sb["kinds"].items():
                if kind == "loop_iteration" and not loop_reliable:
                    continue
                c0, s0, _ = sa["kinds"].get(kind, (np.zeros(HIST_BUCKETS, np.uint64), 0, 0))
                diff = counts - c0
                if not diff.any():
                    continue
                top = int(np.flatnonzero(diff)[-1])
                exact = max_ns < lib.vt_hist_bucket_upper(top)
                h = LatencyHistogram.from_bucket_counts(diff, sum_ns=sum_ns - s0, max_ns=max_ns if exact else None)
                rec = h.to_dict()
                rec["bytes"] = sb["bytes"].get(kind, 0) - sa["bytes"].get(kind, 0)
                entry["calls"][kind] = rec
                call_ns[kind] = h.sum_ns
            entry["injected_ns"] = sb["injected_ns"] - sa["injected_ns"]
        sched = thr.sched_delta(a["sched"], b["sched"], tid)
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
    return {"backend": "shim", "window_ns": wall, "pid": pid, "main_tid": pid,
            "threads": sorted(threads, key=lambda t: (t["role"] != "main", t["tid"])),
            "lost_events": b["dropped"] - a["dropped"],
            "blocked_timeline": {"threshold_ns": None, "events": []},
            "probe": {"loop_source": "shim:epoll_wait" if loop_reliable else None, "inject": inject,
                      "untimed": list(untimed),
                      **({} if loop_reliable else {"loop_note": "not measured: with I/O threads the main "
                                                                "thread does not wait in epoll_wait each iteration"})}}


class EbpfWithShimTracer:
    """--backend both: eBPF and the shim on the same server, one window each, side by side.

    The eBPF metrics are the cell's `server`; the shim's ride along under `server["shim"]` so
    reports can show both counts (a cross-check of the two measurement paths)."""

    name = "both"

    def __init__(self, ebpf_tracer, shim_tracer: ShimTracer):
        self.ebpf, self.shim = ebpf_tracer, shim_tracer

    def launch_env(self) -> dict:
        return self.shim.launch_env()  # the region and any injected delay; ebpf probes the wrappers

    def chown_region(self, uid: int, gid: int):
        self.shim.chown_region(uid, gid)

    def set_extra_fsync_delay(self, ns: int):
        self.shim.set_extra_fsync_delay(ns)

    def start(self, target):
        self.shim.start(target)
        self.ebpf.start(target)

    def start_paused(self, target):
        self.shim.start_paused(target)

    def resume(self, target):
        self.shim.resume(target)
        self.ebpf.resume(target)

    def pause(self, target):
        self.shim.pause(target)
        self.ebpf.pause(target)

    def window_begin(self):
        self.shim.window_begin()
        self.ebpf.window_begin()

    def window_end(self) -> dict:
        metrics = self.ebpf.window_end()
        metrics["shim"] = self.shim.window_end()
        return metrics

    def stop(self):
        try:
            self.ebpf.stop()
        finally:
            self.shim.stop()
