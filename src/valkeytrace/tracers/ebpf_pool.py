"""The compiled probe program's maps: read at a window's edges (read_snapshot), and the program kept
between launches: one compile per valkeytrace process.

Compiling probes/valkey_threads.bpf.c (clang, then the kernel's verifier) takes 1-4 s on the
reference VM; a compare of 3 + 3 launches used to pay it at every launch. The program holds no
server's pid (it reads it from the `target` map), so once a launch ends its program is parked here,
detached from every tracepoint and uprobe, its maps zeroed, and the next launch of the same plan
(same binary, same probe groups, same filesystem, same flags) takes it, writes its own server's pid
and attaches. A launch that finds none compiles (and parks its program when it ends); two tracers
at once (a primary and its replicas) each hold one. bcc's own exit handler unloads what is parked
when the process ends.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from valkeytrace import system
from valkeytrace.errors import VTError
from valkeytrace.layout import SHIM_THREAD_DTYPE
from valkeytrace.server import threads as thr
from valkeytrace.tracers.ebpf_window import OFFCPU_DTYPE, SINCE_DTYPE, Snapshot, offcpu_reading

# the arrays a launch leaves state in (per-slot figures, open intervals, counters): zeroed before reuse
ZEROED_ARRAYS = (b"threads", b"inflight", b"offcpu_since", b"offcpu", b"func_start", b"run_states", b"loop_last",
                 b"lost", b"extra_count", b"requests_on", b"aof_inodes")
CLEARED_HASHES = (b"extra_slots", b"server_socks")


@dataclass
class Loaded:
    """A compiled program and what was settled with it (the probe plan after any fallback, the call
    sites found in the binary, the idle cause's source, the records' sink)."""
    bpf: Any
    plan: Any
    call_sites: list
    why_syscalls: str | None
    idle: str | None
    defines: dict
    events: Any  # tracers/ebpf_events.Events: the records' sources and their sink
    tracepoints: list = field(default_factory=list)      # detached while parked, attached on reuse
    raw_tracepoints: list = field(default_factory=list)
    aof_fds: set = field(default_factory=set)            # aof_fds entries the last launch set


_PARKED: dict[tuple, list[Loaded]] = {}
_LOCK = threading.Lock()


def take(key: tuple) -> Loaded | None:
    """A parked program of this plan, or None (the caller compiles)."""
    with _LOCK:
        free = _PARKED.get(key)
        return free.pop() if free else None


def park(key: tuple, loaded: Loaded) -> bool:
    """Keep a program for the next launch; False for one whose syscall-number check failed (it timed
    AOF writes with call-site uprobes: the caller unloads it, the next launch compiles and checks anew)."""
    if loaded.idle is None and "sched" in loaded.plan.groups and loaded.defines.get("TASK_STACK_OFFSET"):
        return False
    with _LOCK:
        _PARKED.setdefault(key, []).append(loaded)
    return True


def parked() -> int:
    """How many programs are parked (tests)."""
    with _LOCK:
        return sum(len(v) for v in _PARKED.values())


def set_target(bpf, pid: int) -> None:
    """The server the program traces (0: none)."""
    bpf[b"target"].put(0, pid)


def set_journal_caller(bpf) -> None:
    """Where ext4_dirty_inode's code lies, for a program that begins AOF writes at the journal start
    (probes/vt_sched.bpf.h: only the mtime update's start begins one); once a compiled program."""
    if b"dirty_inode_ip" in getattr(bpf, "tables", {}):
        lo, hi = system.kernel_function_range("ext4_dirty_inode") or (0, 0)
        bpf[b"dirty_inode_ip"].put(0, lo)
        bpf[b"dirty_inode_ip"].put(1, hi)


def detach(bpf) -> tuple[list, list]:
    """Every tracepoint of the program detached: (tracepoints, raw tracepoints) to attach again."""
    tps, raw = list(bpf.tracepoint_fds), list(bpf.raw_tracepoint_fds)
    for tp in tps:
        bpf.detach_tracepoint(tp)
    for tp in raw:
        bpf.detach_raw_tracepoint(tp)
    return tps, raw


def detach_named(bpf, names) -> None:
    """The named scheduler events detached, raw (b"sched_switch") or formatted (b"sched:sched_switch")."""
    for name in names:
        if name in bpf.raw_tracepoint_fds:
            bpf.detach_raw_tracepoint(name)
        if b"sched:" + name in bpf.tracepoint_fds:
            bpf.detach_tracepoint(b"sched:" + name)
    for table in (b"offcpu_since", b"offcpu", b"run_states"):  # what they left open would never close
        try:
            bpf[table].clear()
        except KeyError:
            pass


def attach(bpf, tps: list, raw: list) -> None:
    for tp in tps:
        bpf.attach_tracepoint(tp=tp, fn_name=b"tracepoint__" + tp.replace(b":", b"__"))
    for tp in raw:
        bpf.attach_raw_tracepoint(tp=tp, fn_name=b"raw_tracepoint__" + tp)


def reset(loaded: Loaded) -> None:
    """The maps as a fresh load leaves them, but for what holds for the kernel (the syscall number's
    offset): per-slot arrays zeroed (a few hundred elements), the hashes emptied, the AOF fds unset."""
    bpf = loaded.bpf
    for name in ZEROED_ARRAYS + CLEARED_HASHES:
        if name in bpf.tables:  # else a group not compiled in
            bpf[name].clear()
    for fd in loaded.aof_fds:
        bpf[b"aof_fds"].put(fd, 0)
    loaded.aof_fds = set()


def _lookup(table, key: int, size: int) -> bytes:
    """One array element as raw bytes (bcc's Python map access is too slow for 140 KB values)."""
    got = table.raw(key)
    if got is None or len(got) < size:
        raise VTError(f"cannot read BPF map element {key}")
    return got[:size]


def read_snapshot(tracer: Any, mono_ns: int | None = None) -> Snapshot:
    """The EbpfTracer's per-slot arrays now (ebpf_window.Snapshot); off-CPU intervals still open count up to
    this instant, or to mono_ns when the server ended before it (the next snapshot subtracts them
    back), so a window's difference is exact at its edges."""
    bpf = tracer.bpf
    sched = thr.schedstats(tracer.pid, tracer.names)
    mono_ns = mono_ns or time.monotonic_ns()  # bpf_ktime_get_ns() is CLOCK_MONOTONIC too
    threads, offcpu = {}, {}
    for slot in tracer.slot_tids():
        threads[slot] = np.frombuffer(_lookup(bpf[b"threads"], slot, SHIM_THREAD_DTYPE.itemsize),
                                      dtype=SHIM_THREAD_DTYPE).view(np.recarray)[0].copy()  # fields by attribute
        offcpu[slot] = offcpu_reading(_lookup(bpf[b"offcpu"], slot, OFFCPU_DTYPE.itemsize),
                                      _lookup(bpf[b"offcpu_since"], slot, SINCE_DTYPE.itemsize), mono_ns)
    events = tracer._events  # records the kernel kept but the sink could not
    lost = bpf[b"lost"].value(0) + (int(events.sink.dropped) if events is not None else 0)
    return Snapshot(mono_ns, threads, offcpu, lost, sched)
