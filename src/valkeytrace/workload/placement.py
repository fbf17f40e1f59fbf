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
            # the background clients' niceness (BACKGROUND_NICE; null: equal priority)
            "background_nice": background_nice() if cpus is not None else None}


# the background SET clients' niceness when they share a CPU with the measured GET clients (a
# 2-CPU host): at equal priority the GET process, woken first after the fsync cycle's replies, kept
# the shared CPU for whole rounds of GET-only iterations (no write: no fsync) while the SETs waited,
# so in 1 run in 3 to 1 in 4 the median GET waited no fsync at all (p50 ~0.3 ms instead of ~4.5 at
# always +4 ms) and the "steady" SET load was not steady; at -5, 1 in 18 (docs/explain.md). Needs
# root or CAP_SYS_NICE; without them the clients keep equal priority and the recording says so.
BACKGROUND_NICE = -5


def raise_priority(pid: int, nice: int = BACKGROUND_NICE) -> int | None:
    """Set process pid's niceness (its main thread: the benchmark client runs one);
    the value set, or None when not permitted."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        return nice
    except OSError:
        return None


def background_nice() -> int | None:
    """BACKGROUND_NICE when this process may set it (root, CAP_SYS_NICE), else None."""
    try:
        cur = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)
        os.setpriority(os.PRIO_PROCESS, 0, cur)
        return BACKGROUND_NICE
    except OSError:
        return None


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


__all__ = ["parse_cpu_list", "auto_cpus", "server_cpus_for", "choose", "describe", "pin", "raise_priority",
           "background_nice", "BACKGROUND_NICE"]
