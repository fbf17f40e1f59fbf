"""What the tracer's BPF programs cost, from the kernel's own statistics (runs[].tracer.cost).

While the statistics are on the kernel counts, per loaded program, its runs and the time they took
(/proc/PID/fdinfo/FD of the program's fd: run_cnt, run_time_ns), as ebpf_exporter publishes them. When
kernel.bpf_stats_enabled is off, the tracer turns them on by holding an fd of bpf(BPF_ENABLE_STATS)
(csrc/vt_bpfstats.c) and closes it when it stops: the kernel counts the holders, so the sysctl is never
written, two tracers at once each keep them on for their own windows (writing the sysctl, one turned them
off under the other), and a tracer killed gives its hold back with its fds. Only where that call is refused
(a kernel before 5.8) is the sysctl written, and put back as found. The count costs ~20 ns a run while on.
Beside them, the tracer process's own CPU and peak memory. Figures only: reporters say them."""
from __future__ import annotations

import os
import time

from valkeytrace import system

STATS = "/proc/sys/kernel/bpf_stats_enabled"


def stats_state() -> int | None:
    """kernel.bpf_stats_enabled now (0 or 1), or None where it cannot be read."""
    try:
        with open(STATS) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return None


def _hold() -> int | None:
    """An fd that keeps the statistics on while it is open (bpf(BPF_ENABLE_STATS)), or None where the
    kernel refuses it."""
    from valkeytrace._native import lib

    fd = lib.vt_bpf_enable_stats()
    if fd < 0:
        return None
    os.set_inheritable(fd, False)
    return fd


def how_turned_on() -> str | None:
    """How a tracer would turn the statistics on here when they are off: "held" (an fd of
    BPF_ENABLE_STATS, tried and closed), "sysctl" (written, then put back), or None (neither)."""
    fd = _hold()
    if fd is not None:
        os.close(fd)
        return "held"
    return "sysctl" if os.access(STATS, os.W_OK) else None


def _set(on: int) -> bool:
    try:
        with open(STATS, "w") as f:
            f.write(str(on))
        return True
    except OSError:
        return False


def _fdinfo(fd: int) -> tuple[int, int] | None:
    """(runs, run ns) of a program fd of this process, or None."""
    runs = ns = None
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("run_cnt:"):
                    runs = int(line.split()[1])
                elif line.startswith("run_time_ns:"):
                    ns = int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None if runs is None or ns is None else (runs, ns)


def attach_point(name: str, bpf, uprobes) -> str | None:
    """What a program of the tracer has been attached to since it was loaded (tracepoints by name, uprobes
    by the symbols or addresses that run it), or None for one never attached."""
    points = sorted(p for p in getattr(bpf, "attached", {}).get(name.encode(), ()) if p != "uprobe")
    sites = sorted({(u.sym or hex(u.addr or 0)) + (" (return)" if u.ret else "") for u in uprobes if u.fn == name})
    if sites:
        points.append("uprobe:" + ", ".join(sites[:4]) + (f" +{len(sites) - 4} more" if len(sites) > 4 else ""))
    return ", ".join(points) or None


class Cost:
    """One window's BPF cost: begin() before it, end() after; restore() when the tracer stops."""

    def __init__(self):
        self.found = stats_state()
        self.turned_on = False
        self._held: int | None = None  # the BPF_ENABLE_STATS fd while this tracer keeps them on
        self._wrote = False  # the sysctl written instead (a kernel without BPF_ENABLE_STATS)
        self._begin: dict = {}
        self._cpu0 = self._t0 = self._edge0 = self._cpu1 = self._t1 = 0.0

    def _programs(self, bpf) -> dict:
        out = {}
        for raw_name, fn in dict(getattr(bpf, "funcs", {}) or {}).items():
            name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
            got = _fdinfo(fn.fd) if getattr(fn, "fd", None) is not None else None
            if got is not None:
                out[name] = got
        return out

    @staticmethod
    def _cpu() -> float:
        """The process's CPU seconds, from the scheduler's own ns count (os.times() counts in ticks: 10 ms,
        an eighth of the budget over an 8 s window)."""
        return time.process_time()

    def edge(self) -> None:
        """The start of a window edge's work (reading the maps at begin, or at end: stop())."""
        self._edge0 = self._cpu()

    def enable(self) -> None:
        """The kernel's statistics on, when they were found off (restore() lets them go)."""
        if self.found == 0 and not self.turned_on:
            self._held = _hold()
            self._wrote = self._held is None and _set(1)
            self.turned_on = self._held is not None or self._wrote

    def begin(self, bpf) -> None:
        self.enable()
        self._begin = self._programs(bpf)
        self._cpu0, self._t0 = self._cpu(), time.monotonic()
        self._begin_edge = self._cpu0 - self._edge0

    def stop(self) -> None:
        """The window's steady part ends (called first thing in the tracer's window_end)."""
        self._cpu1, self._t1 = self._cpu(), time.monotonic()

    def end(self, bpf, uprobes=()):
        """The window's recording.model.TracerCost: every program (what it is attached to, its runs and their
        time), stats_enabled (as found), tracer_cpu_pct_of_core (the process's CPU while attached, between the
        window's edges), window_edges_cpu_ms (the edges' own work: reading the maps and the kernel's schedstat
        at begin and end), peak_rss_mb; the requests and ns per request are the recorder's (the server's own
        counters)."""
        from valkeytrace.recording.model import BpfProgram, TracerCost

        wall = max(self._t1 - self._t0, 1e-9)
        now = self._programs(bpf)
        programs = []
        for name, (runs, ns) in sorted(now.items()):
            r0, n0 = self._begin.get(name, (0, 0))
            where = attach_point(name, bpf, uprobes)
            if runs - r0 > 0 or where:  # every program that ran or was attached; not those never used
                programs.append(BpfProgram(name=name, attach=where or "detached", runs=runs - r0, run_ns=ns - n0))
        counted = self.found == 1 or self.turned_on
        edges_ms = 1000 * (self._begin_edge + self._cpu() - self._cpu1)
        return TracerCost(programs=programs if counted else [], stats_enabled=self.found, counted=counted,
                          tracer_cpu_pct_of_core=round(100 * (self._cpu1 - self._cpu0) / wall, 3),
                          window_edges_cpu_ms=round(edges_ms, 1),
                          peak_rss_mb=round(system.peak_rss_kb() / 1024, 1))

    def restore(self) -> None:
        """The statistics as they were found: this tracer's hold closed (or the sysctl put back)."""
        if self._held is not None:
            os.close(self._held)
            self._held, self.turned_on = None, False
        elif self._wrote and _set(0):
            self._wrote = self.turned_on = False
