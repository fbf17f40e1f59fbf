"""The eBPF backend: loads probes/valkey_threads.bpf.c against one valkey-server and reads it.

This is the only module that imports bcc (Debian's python3-bpfcc, never PyPI's "bcc"). Only
tracepoints and uprobes are used: the kernels we target may have no kprobes, and their headers
may come from another kernel version, so no kernel struct is ever read.

Everything is aggregated in kernel maps; a measured window is the difference of two snapshots
(taken at the window's edges), with off-CPU intervals still open at either edge cut at the edge.
Main-thread blocked intervals come through a ring buffer polled on a timer (no wakeups).
"""
from __future__ import annotations

import ctypes
import os
import tempfile
import threading
import time

import numpy as np

from valkeytrace._native import lib
from valkeytrace.errors import VTError
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.layout import (BLOCK_EVENT_DTYPE, CALL_NAMES, EVENT_STATE_NAMES, HIST_BUCKETS,
                               SHIM_THREAD_DTYPE, STATE_NAMES)
from valkeytrace.target import threads as thr
from valkeytrace.tracers import PROBES_DIR, probe_source

MAIN_PROBE = "valkey_threads"
POLL_INTERVAL_S = 0.1
RINGBUF_PAGES = 256  # 1 MiB: ~40k events between polls
LOOP_SYMBOL = "beforeSleep"
FLUSH_SYMBOL = "flushAppendOnlyFile"
SHIM_SYMBOLS = {"fdatasync": "on_shim_fdatasync_enter", "fsync": "on_shim_fsync_enter"}


def import_bcc():
    try:
        import bcc  # noqa: F401  (Debian python3-bpfcc)
    except ImportError as exc:
        raise VTError("bcc is not importable: install Debian's python3-bpfcc and use a venv made with "
                      "--system-site-packages (make setup does both)") from exc
    return bcc


def bcc_location() -> str | None:
    """Where bcc's Python bindings are, or None when they cannot be imported."""
    try:
        bcc = import_bcc()
    except VTError:
        return None
    return os.path.dirname(bcc.__file__)


def unusable_reason() -> str | None:
    """Why an eBPF recording cannot run here (None when it can): the checks doctor makes."""
    from valkeytrace import system

    if not system.has_bpf_privileges():
        return "needs root or CAP_BPF+CAP_PERFMON"
    if bcc_location() is None:
        return "bcc (Debian python3-bpfcc) is not importable"
    if system.tracefs_dir() is None:
        return "tracefs is not mounted (valkeytrace doctor --fix)"
    if not system.headers_present():
        return f"no kernel headers at {system.headers_dir()} (valkeytrace doctor --fix)"
    return None


def cflags(**defines) -> list[str]:
    """-D flags for the probe parameters, plus the include path of the shared layout header."""
    flags = [f"-I{PROBES_DIR}", "-DVT_BPF=1", "-Wno-visibility", "-Wno-macro-redefined"]
    flags += [f"-D{k}={int(v)}" for k, v in defines.items()]
    return flags


def compile_probe(name: str, **defines):
    """Compile and load probes/<name>.bpf.c; tracepoint probes attach on load."""
    bcc = import_bcc()
    return bcc.BPF(text=probe_source(name).encode(), cflags=cflags(**defines))


def selftest(calls: int = 7) -> int:
    """Load the selftest probe, make `calls` fdatasync(2) calls, return how many it counted."""
    bpf = compile_probe("selftest", TARGET_TGID=os.getpid())
    try:
        with tempfile.TemporaryFile() as f:
            for _ in range(calls):
                os.fdatasync(f.fileno())
        return int(bpf[b"fdatasync_calls"][0].value)
    finally:
        bpf.cleanup()


def has_symbol(binary: str, symbol: str) -> bool:
    bcc = import_bcc()
    try:
        return bool(bcc.BPF.get_user_functions_and_addresses(binary.encode(), f"^{symbol}$".encode()))
    except Exception:
        return False


# Probe groups. "flush" (uprobe + uretprobe on flushAppendOnlyFile) is off by default: valkey
# calls it from every beforeSleep, so its count is the loop-iteration count, and its time is the
# AOF write + fsync already measured; its two extra uprobe hits per iteration cost ~2-3% GET TPS.
# record --aof-flush-probe turns it on; $VALKEYTRACE_PROBES (e.g. "sched,writes") sets the groups
# for overhead experiments (benchmarks/overhead.py --probes).
PROBE_GROUPS = ("writes", "epoll", "sched", "loop", "flush")
DEFAULT_GROUPS = ("writes", "epoll", "sched", "loop")


def probe_groups(extra: tuple = ()) -> set[str]:
    env = os.environ.get("VALKEYTRACE_PROBES")
    if env:
        return {g for g in env.split(",") if g in PROBE_GROUPS}
    return set(DEFAULT_GROUPS) | set(extra)


_PID_OFFSET: list = []  # memo: [offset or None]


def task_pid_offset() -> int | None:
    """Byte offset of task_struct.pid in the running kernel, from its BTF (bpftool), or None.
    The raw sched_switch probe needs it; without it the regular tracepoint is used."""
    if _PID_OFFSET:
        return _PID_OFFSET[0]
    offset = None
    btf = "/sys/kernel/btf/vmlinux"
    if os.path.exists(btf) and os.environ.get("VALKEYTRACE_RAW_SCHED", "1") == "1":
        import re
        import shutil
        import subprocess

        tool = shutil.which("bpftool") or next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool")
                                                 if os.path.exists(p)), None)
        if tool:
            try:
                out = subprocess.run([tool, "btf", "dump", "file", btf, "format", "raw"], capture_output=True,
                                     text=True, timeout=20).stdout
                m = re.search(r"STRUCT 'task_struct' size=\d+ vlen=\d+\n((?:\t.*\n)+)", out)
                if m:
                    pid = re.search(r"^\t'pid' type_id=\d+ bits_offset=(\d+)$", m.group(1), re.M)
                    if pid and int(pid.group(1)) % 8 == 0:
                        offset = int(pid.group(1)) // 8
            except (OSError, subprocess.TimeoutExpired):
                offset = None
    _PID_OFFSET.append(offset)
    return offset


def probe_defines(pid: int, *, block_threshold_ns: int, loop_from_epoll: bool, groups=PROBE_GROUPS) -> dict:
    return {"TASK_PID_OFFSET": (task_pid_offset() or 0) if "sched" in groups else 0,"TARGET_TGID": pid, "MAIN_TID": pid, "BLOCK_THRESHOLD_NS": block_threshold_ns,
            "LOOP_FROM_EPOLL": int(loop_from_epoll), "RINGBUF_PAGES": RINGBUF_PAGES,
            "TRACE_WRITES": int("writes" in groups), "TRACE_EPOLL": int("epoll" in groups),
            "TRACE_SCHED": int("sched" in groups),
            # raw_syscalls:sys_enter/exit: no trace record per call (per-syscall tracepoints cost
            # ~13% GET TPS here, raw ones ~0: benchmarks/overhead.py); VALKEYTRACE_RAW_SYSCALLS=0 reverts
            "RAW_SYSCALLS": int(os.environ.get("VALKEYTRACE_RAW_SYSCALLS", "1") == "1")}


def printable_program(defines: dict) -> str:
    """The exact text and flags `record` would load (for --print-probes)."""
    flags = " ".join(cflags(**defines))
    return f"// bcc cflags: {flags}\n" + probe_source(MAIN_PROBE)


MAX_SLOTS = lib.VT_SHIM_MAX_THREADS
OFFCPU_SLOT_BYTES = 8 * len(CALL_NAMES) * len(STATE_NAMES)
_SINCE_DTYPE = np.dtype([("start_ns", "<u8"), ("tid", "<u4"), ("cause", "<u2"), ("state", "<u2")])


def _lookup(table, key: int, size: int) -> bytes:
    """One array element as raw bytes (bcc's Python map access is too slow for 140 KB values)."""
    from bcc import libbcc

    k = ctypes.c_int(key)
    buf = ctypes.create_string_buffer(size)
    if libbcc.lib.bpf_lookup_elem(table.map_fd, ctypes.byref(k), buf) < 0:
        raise VTError(f"cannot read BPF map element {key}")
    return buf.raw


class _Snapshot:
    """The per-slot arrays at one instant; off-CPU intervals still open count up to that instant
    (the next snapshot subtracts them back), so a window's difference is exact at its edges."""

    __slots__ = ("mono_ns", "threads", "offcpu", "lost", "sched")

    def __init__(self, tracer: "EbpfTracer"):
        bpf = tracer.bpf
        self.sched = thr.schedstats(tracer.pid, tracer.names)
        self.mono_ns = time.monotonic_ns()  # bpf_ktime_get_ns() is CLOCK_MONOTONIC too
        self.threads, self.offcpu = {}, {}
        for slot in tracer.slot_tids():
            self.threads[slot] = np.frombuffer(_lookup(bpf[b"threads"], slot, SHIM_THREAD_DTYPE.itemsize),
                                               dtype=SHIM_THREAD_DTYPE)[0].copy()
            off = np.frombuffer(_lookup(bpf[b"offcpu"], slot, OFFCPU_SLOT_BYTES), dtype="<u8").reshape(
                len(CALL_NAMES), len(STATE_NAMES)).copy()
            since = np.frombuffer(_lookup(bpf[b"offcpu_since"], slot, _SINCE_DTYPE.itemsize), dtype=_SINCE_DTYPE)[0]
            if since["start_ns"] and self.mono_ns > since["start_ns"] and since["cause"] < len(CALL_NAMES) \
                    and since["state"] < len(STATE_NAMES):
                off[since["cause"], since["state"]] += self.mono_ns - int(since["start_ns"])
            self.offcpu[slot] = off
        self.lost = bpf[b"lost"][0].value


class EbpfTracer:
    """Per-thread tracing of one valkey-server with bcc; window metrics as recording dicts."""

    name = "ebpf"

    def __init__(self, block_threshold_us: float = 100.0, inject: dict | None = None, aof_flush_probe: bool = False):
        self.block_threshold_ns = int(block_threshold_us * 1000)
        self.extra_groups = ("flush",) if aof_flush_probe else ()
        self.inject = inject
        self.shim_library = None
        if inject:  # the shim is preloaded for the injection only; its wrappers are probed
            from valkeytrace.tracers.shim import shim_library

            self.shim_library = shim_library()
        self.bpf = None
        self._events: list[bytes] = []
        self._events_lock = threading.Lock()
        self._stop = threading.Event()
        self._poller = None
        self.names: dict[int, str] = {}
        self.info: dict = {}
        self._aof_fds: set[int] = set()
        self._extra: dict[int, int] = {}
        self.untracked_threads: set[int] = set()

    # -- lifecycle ------------------------------------------------------------------------------
    def launch_env(self) -> dict:
        if not self.inject:
            return {}
        from valkeytrace.tracers.shim import preload_env

        return preload_env(self.shim_library, None, self.inject)

    def start_paused(self, target):
        pass  # probes attach in resume(): before that the server runs untraced

    def resume(self, target):
        self.start(target)

    def start(self, target):
        bcc = import_bcc()
        self.pid = target.pid
        self.aof_dir = self._aof_dir(target)
        binary = os.path.realpath(f"/proc/{self.pid}/exe")
        groups = probe_groups(self.extra_groups)
        loop_uprobe = "loop" in groups and has_symbol(binary, LOOP_SYMBOL)
        flush_probe = "flush" in groups and has_symbol(binary, FLUSH_SYMBOL)
        shim = bool(self.shim_library)
        defines = probe_defines(self.pid, block_threshold_ns=self.block_threshold_ns,
                                loop_from_epoll=not loop_uprobe and "loop" in groups, groups=groups)
        t0 = time.monotonic()
        self._uprobes = []  # (ret, binary, symbol, fn) as attached, for set_attached()
        if loop_uprobe:
            self._uprobes.append((False, binary, LOOP_SYMBOL, "on_before_sleep"))
        if flush_probe:
            self._uprobes += [(False, binary, FLUSH_SYMBOL, "on_flush_enter"),
                              (True, binary, FLUSH_SYMBOL, "on_flush_return")]
        if shim:
            for sym, fn in SHIM_SYMBOLS.items():
                self._uprobes += [(False, self.shim_library, sym, fn), (True, self.shim_library, sym, "on_shim_sync_return")]
        try:
            self.bpf = bcc.BPF(text=probe_source(MAIN_PROBE).encode(), cflags=cflags(**defines))
            self._attach_uprobes()
            self.bpf[b"block_events"].open_ring_buffer(self._on_event)
        except VTError:
            self.stop()
            raise
        except Exception as exc:  # bcc raises bare Exception on compile/attach failures
            self.stop()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise VTError(f"eBPF probes failed to load ({first}); run 'valkeytrace doctor'") from exc
        self.info = {"attach_ms": round((time.monotonic() - t0) * 1000, 1), "binary": binary,
                     "loop_source": f"uprobe:{LOOP_SYMBOL}" if loop_uprobe else "epoll_wait",
                     "flush_probe": flush_probe, "shim_probes": shim, "probe_groups": sorted(groups),
                     "block_threshold_ns": self.block_threshold_ns, "defines": defines}
        self._refresh()
        self._poller = threading.Thread(target=self._poll, name="valkeytrace-ringbuf", daemon=True)
        self._poller.start()

    def _attach_uprobes(self):
        for ret, path, sym, fn in self._uprobes:
            attach = self.bpf.attach_uretprobe if ret else self.bpf.attach_uprobe
            attach(name=path.encode(), sym=sym.encode(), fn_name=fn.encode(), pid=self.pid)

    def set_attached(self, on: bool):
        """Detach every probe (the programs stay loaded) or attach them again: for measuring the
        tracer's cost on one server, alternating, without recompiling."""
        bpf = self.bpf
        if on == getattr(self, "_attached", True):
            return
        self._attached = on
        if not on:
            self._tps = [tp for tp in bpf.tracepoint_fds]
            self._raw_tps = [tp for tp in bpf.raw_tracepoint_fds]
            for tp in self._tps:
                bpf.detach_tracepoint(tp)
            for tp in self._raw_tps:
                bpf.detach_raw_tracepoint(tp)
            for ret, path, sym, _ in self._uprobes:
                (bpf.detach_uretprobe if ret else bpf.detach_uprobe)(name=path.encode(), sym=sym.encode(), pid=self.pid)
        else:
            for tp in getattr(self, "_tps", []):
                bpf.attach_tracepoint(tp=tp, fn_name=b"tracepoint__" + tp.replace(b":", b"__"))
            for tp in getattr(self, "_raw_tps", []):
                bpf.attach_raw_tracepoint(tp=tp, fn_name=b"raw_tracepoint__" + tp)
            self._attach_uprobes()

    def stop(self):
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=2)
            self._poller = None
        if self.bpf is not None:
            try:
                self.bpf.cleanup()  # detaches uprobes and tracepoints, closes maps and programs
            finally:
                self.bpf = None

    # -- background work ----------------------------------------------------------------------
    @staticmethod
    def _aof_dir(target) -> str:
        cfg = target.describe()["config"]
        base = cfg.get("dir") or "."
        if not os.path.isabs(base):
            base = os.path.join(os.path.realpath(f"/proc/{target.pid}/cwd"), base)
        return os.path.join(base, cfg.get("appenddirname") or "")

    def _refresh(self):
        """Thread names, slots and AOF fds, refreshed as threads appear and files rotate."""
        live = thr.list_threads(self.pid)
        self.names.update(live)
        fds = {fd for fd in thr.aof_fds(self.pid, self.aof_dir) if fd < 4096}
        table = self.bpf[b"aof_fds"]
        for fd in fds - self._aof_fds:
            table[table.Key(fd)] = table.Leaf(1)
        for fd in self._aof_fds - fds:
            table[table.Key(fd)] = table.Leaf(0)
        self._aof_fds = fds
        # a thread whose tid - pid falls outside the slot range gets a free slot from the top
        taken = {tid - self.pid for tid in live if 0 <= tid - self.pid < MAX_SLOTS}
        extra = self.bpf[b"extra_slots"]
        for tid in live:
            if 0 <= tid - self.pid < MAX_SLOTS or tid in self._extra:
                continue
            free = [s for s in range(MAX_SLOTS - 1, -1, -1) if s not in taken and s not in self._extra.values()]
            if not free:
                self.untracked_threads.add(tid)
                continue
            self._extra[tid] = free[0]
            extra[extra.Key(tid)] = extra.Leaf(free[0])
        if self._extra:
            counter = self.bpf[b"extra_count"]
            counter[counter.Key(0)] = counter.Leaf(len(self._extra))

    def slot_tids(self) -> dict:
        """{slot: tid} of every thread seen."""
        out = {tid - self.pid: tid for tid in self.names if 0 <= tid - self.pid < MAX_SLOTS}
        out.update({slot: tid for tid, slot in self._extra.items()})
        return out

    def _on_event(self, ctx, data, size):
        raw = ctypes.string_at(data, size)
        with self._events_lock:
            self._events.append(raw)

    def _poll(self):
        n = 0
        while not self._stop.wait(POLL_INTERVAL_S):
            bpf = self.bpf
            if bpf is None:
                break
            try:
                bpf.ring_buffer_consume()
                n += 1
                if n % 5 == 0:
                    self._refresh()
            except Exception:
                if self._stop.is_set():
                    break

    # -- windows --------------------------------------------------------------------------------
    def window_begin(self):
        self._refresh()
        self.bpf.ring_buffer_consume()
        with self._events_lock:
            self._events.clear()
        self._begin = _Snapshot(self)

    def window_end(self) -> dict:
        end = _Snapshot(self)
        self.bpf.ring_buffer_consume()
        self._refresh()
        with self._events_lock:
            events, self._events = self._events, []
        return window_metrics(self._begin, end, self.pid, self.names, self.slot_tids(), events, self.info)


def window_metrics(a: _Snapshot, b: _Snapshot, pid: int, names: dict, slots: dict, events: list[bytes],
                   info: dict) -> dict:
    """The recording's `server` dict for one window: raw per-thread data, nothing derived."""
    threads: dict[int, dict] = {}
    for slot, tid in slots.items():
        if slot not in b.threads:
            continue
        name = names.get(tid, "?")
        entry = {"tid": tid, "name": name, "role": thr.thread_role(tid, pid, name), "calls": {}, "off_cpu_ns": {}}
        sched = thr.sched_delta(a.sched, b.sched, tid)
        if sched:
            entry["sched"] = sched  # total on-CPU / run-queue time, even for threads that never switched
        tb, ta = b.threads[slot], a.threads.get(slot)
        if ta is not None and ta["tid"] != tb["tid"]:
            ta = None  # the slot changed hands within the window: count from zero
        for kind, call in enumerate(CALL_NAMES):
            hb = tb["hist"][kind]
            diff = hb["buckets"] - (ta["hist"][kind]["buckets"] if ta is not None else 0)
            count = int(hb["count"]) - (int(ta["hist"][kind]["count"]) if ta is not None else 0)
            if count <= 0 or not diff.any():
                continue
            top = int(np.flatnonzero(diff)[-1])
            max_ns = int(hb["max_ns"])
            exact_max = max_ns < lib.vt_hist_bucket_upper(top)  # the kernel's max is all-time
            sum_ns = int(hb["sum_ns"]) - (int(ta["hist"][kind]["sum_ns"]) if ta is not None else 0)
            rec = LatencyHistogram.from_bucket_counts(diff, sum_ns=sum_ns,
                                                      max_ns=max_ns if exact_max else None).to_dict()
            rec["bytes"] = int(tb["bytes"][kind]) - (int(ta["bytes"][kind]) if ta is not None else 0)
            entry["calls"][call] = rec
        off = b.offcpu[slot] - (a.offcpu.get(slot, 0))
        for cause, state in zip(*np.nonzero(off)):
            if off[cause, state] > 0 and off[cause, state] < 1 << 62:
                entry["off_cpu_ns"].setdefault(CALL_NAMES[cause], {})[STATE_NAMES[state]] = int(off[cause, state])
        threads[tid] = entry
    timeline = []
    if events:
        arr = np.frombuffer(b"".join(e[:BLOCK_EVENT_DTYPE.itemsize] for e in events), dtype=BLOCK_EVENT_DTYPE)
        keep = (arr["start_ns"] + arr["duration_ns"] > a.mono_ns) & (arr["start_ns"] < b.mono_ns)
        arr = arr[keep]
        timeline = [[int(s) - a.mono_ns, int(d), int(tid), CALL_NAMES[c], EVENT_STATE_NAMES[st]]
                    for s, d, tid, c, st in zip(arr["start_ns"], arr["duration_ns"], arr["tid"], arr["cause"],
                                                arr["state"])]
    return {
        "backend": "ebpf",
        "window_ns": b.mono_ns - a.mono_ns,
        "pid": pid,
        "main_tid": pid,
        "threads": sorted(threads.values(), key=lambda t: (t["role"] != "main", t["tid"])),
        "lost_events": int(b.lost - a.lost),
        "blocked_timeline": {"threshold_ns": info.get("block_threshold_ns"),
                             "columns": ["start_offset_ns", "duration_ns", "tid", "cause", "state"],
                             "events": timeline},
        "probe": {k: v for k, v in info.items() if k != "defines"},
        "hist_buckets": HIST_BUCKETS,
    }
