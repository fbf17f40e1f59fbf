"""Where the benchmark clients and a launched server run: on CPUs of their own, apart from each
other, when the host has them (`record --client-cpus`, default auto).

A load generator that shares its CPUs with the server under test measures the scheduler as much
as the server. On this project's 2-CPU VM, left to itself, the kernel gave the GET client a CPU to
itself and made the server's main thread share the other with the background SET client (main
thread waiting for a CPU ~25% of its time), and a CPU hog started beside them landed beside
whichever task the balancer picked, a different one from one run to the next (docs/explain.md,
Controls). With the clients on CPUs of their own and the server on the rest, contention that
arrives from outside reaches the server, where a user's production load would meet it, and
launches agree with each other.

auto: the clients get the last k of the CPUs this process may use, k = max(1, min(2, CPUs - the
server's main and I/O threads)), taken outside an attached server's own affinity when it is
pinned; a server valkeytrace launched gets the other CPUs when they are at least as many as its
main and I/O threads (else it is left where the kernel puts it: two threads that busy-poll must
not share one CPU). An attached server is never moved. No placement on a host with one CPU. The
cost on a small host is stated, not hidden: two client processes on one CPU wait for it about
half their time, which the recording measures (run.host_cpu.clients_cpu_wait) and the reports
state.
"""
from __future__ import annotations

import functools
import os

from valkeytrace.errors import VTUsageError
from valkeytrace.system import format_cpu_list

CLIENT_PROCESSES = 2  # the read-heavy cell's measured GET client and its background SET client


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'1', '2-3', '0,2-3' -> sorted CPU numbers; VTUsageError on anything else."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise VTUsageError(f"--client-cpus {text!r}: {part!r} is not a CPU number or range (e.g. 1, 2-3, 0,2)")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise VTUsageError(f"--client-cpus {text!r}: range {part!r} runs backwards")
        cpus.update(range(a, b + 1))
    return tuple(sorted(cpus))


def auto_cpus(allowed, server_cpus, server_threads: int) -> tuple[int, ...] | None:
    """The auto placement (pure): allowed are the CPUs valkeytrace may use, server_cpus the
    server's affinity, server_threads its main + I/O threads. None: no placement."""
    allowed = sorted(allowed)
    if len(allowed) < 2:
        return None
    k = max(1, min(CLIENT_PROCESSES, len(allowed) - max(1, server_threads)))
    outside = [c for c in allowed if c not in set(server_cpus)]
    return tuple((outside or allowed)[-k:])


def server_cpus_for(clients, allowed, server_threads: int) -> tuple[int, ...] | None:
    """The CPUs a launched server gets beside clients on `clients` (pure): the rest of allowed,
    when they are at least as many as its main and I/O threads; else None (not moved)."""
    if not clients:
        return None
    rest = tuple(c for c in sorted(allowed) if c not in set(clients))
    return rest if len(rest) >= max(1, server_threads) else None


def server_affinity(pid: int | None) -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(pid))) if pid else ()
    except OSError:
        return ()


def choose(spec: str, server_pid: int | None, server_threads: int) -> tuple[int, ...] | None:
    """The clients' CPUs for --client-cpus spec ('auto', 'none' or a CPU list)."""
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    if spec == "none":
        return None
    if spec == "auto":
        return auto_cpus(allowed, server_affinity(server_pid), server_threads)
    cpus = parse_cpu_list(spec)
    missing = [c for c in cpus if c not in allowed]
    if missing:
        raise VTUsageError(f"--client-cpus {spec}: CPU {format_cpu_list(missing)} is not one this process "
                           f"may run on ({format_cpu_list(allowed)})")
    return cpus


def describe(cpus, server_pid: int | None, spec: str, server_moved: bool) -> dict:
    """The recording's client.placement."""
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    return {"requested": spec, "client_cpus": None if cpus is None else list(cpus),
            "server_cpus": list(server_affinity(server_pid)), "server_moved": server_moved,
            "host_cpus": list(allowed),
            # how the background clients are preferred on the CPU they share with the GET clients
            **(background_priority() if cpus is not None else {"background_nice": None, "background_slice_us": None})}


# The background SET clients share a CPU with the measured GET clients on a 2-CPU host, and the
# order in which the two processes run after a fsync cycle's replies decides the GETs' path: the
# SETs that reach the server before its next read make that iteration fsync, and the GETs that come
# after them wait the rest of it and their own (two cycles), while GETs read in an iteration without
# a SET are answered at once.
# - At equal priority the GET process, woken first, kept the CPU for whole rounds of GET-only
#   iterations while the SETs waited: in 1 run in 3 to 1 in 4 the median GET waited no fsync at
#   all (p50 ~0.3 ms instead of ~9 at always +4 ms), and the "steady" load was not steady.
# - At nice -5 (2026-12-01 to 12-02) that fell to 1 in 18, but the GETs that took one cycle were
#   34-48% of a run's (6 runs), so the p50 sat on the edge between one and two cycles and flipped
#   to one cycle in about 1 launch in 8 (5.5-6.9 ms against 9.1-9.6): the launches' p50 was
#   bimodal and a +1 ms fsync change was lost in it (docs/explain.md). Under everysec the weight
#   nice -5 gives also took the GET clients' CPU: GET TPS 24K/s against 46K/s at equal weight.
# - A short EEVDF slice (Linux 6.12+, sched_setattr's sched_runtime) makes the SET process run first
#   when it wakes, at equal weight: one-cycle GETs 20-30% of a run (10 runs), p50 9.04-9.65 ms, and
#   everysec's GET TPS 45-48K/s (3 runs); no launch on the short path in 120 (docs/explain.md). That is the default; where the kernel keeps no custom
#   slice, nice -5 as before; without root or CAP_SYS_NICE for that, equal priority, and the
#   recording says which (client.placement.background_slice_us, background_nice).
BACKGROUND_SLICE_US = 100   # the kernel's smallest custom slice (0.1 ms)
BACKGROUND_NICE = -5        # where the kernel has no custom slice


def _tids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


@functools.lru_cache(maxsize=1)
def _slice_supported() -> bool:
    """Whether this kernel keeps a custom slice: set one on a thread of our own and read it back."""
    import threading

    from valkeytrace._native import lib

    out = []

    def probe():
        tid = threading.get_native_id()
        ok = lib.vt_sched_set_slice(tid, os.getpriority(os.PRIO_PROCESS, tid), BACKGROUND_SLICE_US * 1000) == 0
        out.append(ok and lib.vt_sched_get_slice(tid) == BACKGROUND_SLICE_US * 1000)
    t = threading.Thread(target=probe, name="vt-slice-probe")
    t.start()
    t.join()
    return bool(out and out[0])


def background_priority() -> dict:
    """What prefer_background() applies here: {background_slice_us, background_nice}."""
    if _slice_supported():
        return {"background_slice_us": BACKGROUND_SLICE_US, "background_nice": os.getpriority(os.PRIO_PROCESS, 0)}
    try:
        cur = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)
        os.setpriority(os.PRIO_PROCESS, 0, cur)
        return {"background_slice_us": None, "background_nice": BACKGROUND_NICE}
    except OSError:
        return {"background_slice_us": None, "background_nice": None}


def prefer_background(pid: int) -> dict:
    """Prefer process pid (a background client) on wake-up, as background_priority() says, on
    every thread it has; what was applied."""
    from valkeytrace._native import lib

    how = background_priority()
    for tid in _tids(pid):
        if how["background_slice_us"]:  # its own niceness kept: the GET clients' weight, as they inherit ours
            try:
                nice = os.getpriority(os.PRIO_PROCESS, tid)
            except OSError:
                continue
            lib.vt_sched_set_slice(tid, nice, BACKGROUND_SLICE_US * 1000)
        elif how["background_nice"] is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, BACKGROUND_NICE)
            except OSError:
                pass
    return how


def pin(pid: int, cpus) -> None:
    """Put every thread of process pid on cpus (a client just started: before it has connected)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            pass


__all__ = ["parse_cpu_list", "auto_cpus", "server_cpus_for", "choose", "describe", "pin", "prefer_background",
           "background_priority", "BACKGROUND_NICE", "BACKGROUND_SLICE_US"]
