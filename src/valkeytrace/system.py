"""What this host can do for tracing, and the system fixes `doctor --fix` (and make setup) apply.

Pure inspection functions plus two fixers (mount tracefs/debugfs, link the nearest kernel
headers for bcc). No bcc import here: the eBPF backend does that.
"""
from __future__ import annotations

import os
import threading
import platform
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CAP_PERFMON = 38
CAP_BPF = 39
TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


def effective_caps() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def has_bpf_privileges() -> bool:
    if os.geteuid() == 0:
        return True
    caps = effective_caps()
    return bool(caps & (1 << CAP_BPF)) and bool(caps & (1 << CAP_PERFMON))


def _exists(p: Path, is_dir: bool = False) -> bool:
    """Path.exists/is_dir that take an unreadable directory (tracefs as a user) for absent."""
    try:
        return p.is_dir() if is_dir else p.exists()
    except PermissionError:
        return False


def tracefs_dir() -> Path | None:
    """The mounted tracefs (the one with events/), or None (also when this user cannot read it)."""
    for cand in TRACEFS_CANDIDATES:
        if _exists(Path(cand, "events"), is_dir=True):
            return Path(cand)
    return None


def tracefs_unreadable() -> Path | None:
    """A tracefs mounted but not readable by this user (eBPF needs root), or None."""
    for cand in TRACEFS_CANDIDATES:
        try:
            Path(cand, "events").is_dir()
        except PermissionError:
            return Path(cand)
    return None


def mount_tracefs() -> list[str]:
    """Mount tracefs and debugfs where missing; return what was done."""
    done = []
    if not Path("/sys/kernel/debug/tracing").exists() and not _mounted("/sys/kernel/debug"):
        if _mount("debugfs", "/sys/kernel/debug"):
            done.append("mounted debugfs on /sys/kernel/debug")
    if tracefs_dir() is None and _mount("tracefs", "/sys/kernel/tracing"):
        done.append("mounted tracefs on /sys/kernel/tracing")
    return done


def _mounted(path: str) -> bool:
    try:
        return any(line.split()[1] == path for line in Path("/proc/mounts").read_text().splitlines())
    except OSError:
        return False


def _mount(fstype: str, path: str) -> bool:
    if not Path(path).is_dir():
        return False
    res = subprocess.run(["mount", "-t", fstype, fstype, path], capture_output=True, text=True)
    return res.returncode == 0


_SYMBOLS: dict = {}


def kernel_function_range(name: str) -> tuple[int, int] | None:
    """[start, end) of a kernel function's code from /proc/kallsyms (end: the next symbol's address), or None
    where it is absent or the addresses are hidden (zero: kptr_restrict, not root). Read once a process."""
    if name not in _SYMBOLS:
        start, addrs = None, []
        try:
            with open("/proc/kallsyms") as f:
                for line in f:
                    a, t, sym = line.split()[:3]
                    if t in "tT":
                        addrs.append(int(a, 16))
                        if sym == name:
                            start = addrs[-1]
        except (OSError, ValueError):
            start = None
        after = [a for a in addrs if a > start] if start else []
        _SYMBOLS[name] = (start, min(after)) if after else None
    return _SYMBOLS[name]


def tracepoint_exists(category: str, event: str) -> bool:
    tfs = tracefs_dir()
    return tfs is not None and _exists(Path(tfs, "events", category, event, "id"))


def uprobes_supported() -> bool:
    tfs = tracefs_dir()
    return tfs is not None and _exists(Path(tfs, "uprobe_events"))


def kprobes_supported() -> bool:
    tfs = tracefs_dir()
    return tfs is not None and _exists(Path(tfs, "kprobe_events"))


def kernel_release() -> str:
    return platform.release()


def possible_cpus() -> int:
    """The CPUs the kernel may ever bring up (per-CPU arrays are this long), from /sys; os.cpu_count() without it."""
    try:
        text = Path("/sys/devices/system/cpu/possible").read_text().strip()
        return max(int(part.split("-")[-1]) for part in text.split(",")) + 1
    except (OSError, ValueError):
        return os.cpu_count() or 1


def kernel_at_least(major: int, minor: int) -> bool:
    return _version_key(kernel_release())[:2] >= (major, minor)


def headers_dir() -> Path:
    return Path("/lib/modules", kernel_release(), "build")


def headers_present() -> bool:
    return Path(headers_dir(), "include").is_dir()


def _version_key(text: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:4])


def nearest_headers() -> tuple[Path, Path] | None:
    """The installed Debian linux-headers pair (arch dir, common dir) nearest the running kernel."""
    arch_suffix = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    cands = []
    for d in Path("/usr/src").glob(f"linux-headers-*-{arch_suffix}"):
        common = Path(str(d)[: -len(arch_suffix)] + "common")
        if Path(d, "include").is_dir() and common.is_dir():
            cands.append((d, common))
    if not cands:
        return None
    running = _version_key(kernel_release())
    # nearest by version, the newest on a tie
    return min(cands, key=lambda pair: (_distance(_version_key(pair[0].name), running),
                                        [-x for x in _version_key(pair[0].name)]))


def _distance(a: tuple, b: tuple) -> tuple:
    return tuple(abs(x - y) for x, y in zip(a + (0,) * 4, b + (0,) * 4))


def link_nearest_headers() -> list[str]:
    """Where the running kernel has no headers, link the nearest installed ones for bcc."""
    if headers_present():
        return []
    pair = nearest_headers()
    if pair is None:
        return []
    arch_dir, common_dir = pair
    moddir = Path("/lib/modules", kernel_release())
    moddir.mkdir(parents=True, exist_ok=True)
    for name, target in (("build", arch_dir), ("source", common_dir)):
        link = moddir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return [f"WARNING: no kernel headers for {kernel_release()}; linked {arch_dir.name} as "
            f"{moddir}/build and {common_dir.name} as {moddir}/source (bcc then works for "
            "tracepoint and uprobe programs, but kernel struct layouts may differ)"]


def headers_are_foreign() -> bool:
    """True when /lib/modules/<release>/build points at another kernel's headers."""
    build = headers_dir()
    try:
        target = os.path.realpath(build)
    except OSError:
        return False
    return build.is_symlink() and kernel_release() not in target


def host_facts(path: str | None = None) -> dict:
    """CPU, memory, kernel, and the filesystem and device under `path` (for recordings)."""
    import psutil

    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    facts = {
        "hostname": platform.node(),
        "kernel": kernel_release(),
        "machine": platform.machine(),
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        # the host's clocks: valkeytrace merge's first guess of two hosts' CLOCK_MONOTONIC offset
        "realtime_minus_monotonic_ns": time.time_ns() - time.monotonic_ns(),
    }
    try:
        facts["boot_id"] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        pass
    if path:
        facts["storage"] = storage_of(path)
    return facts


def storage_of(path: str) -> dict:
    """The mount (device, fstype, mountpoint) that holds path."""
    import psutil

    real = os.path.realpath(path)
    best = None
    for part in psutil.disk_partitions(all=True):
        mp = part.mountpoint
        if real == mp or real.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) > len(best.mountpoint):
                best = part
    if best is None:
        return {"path": real}
    return {"path": real, "device": best.device, "fstype": best.fstype, "mountpoint": best.mountpoint,
            "options": best.opts}


def cache_dir() -> str:
    """Where valkeytrace keeps what it derives from a binary or a kernel ($XDG_CACHE_HOME)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "valkeytrace")


def write_json_cache(path: str, data) -> None:
    """Atomically; a read-only home means no cache, same result."""
    import json

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        pass


def process_schedstat(pid: int) -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) of a process, all its threads (/proc/PID/task/*/schedstat),
    or None. A child that has exited but is not yet reaped still has its totals."""
    from valkeytrace.server import threads as thr

    st = thr.schedstats(pid, thr.list_threads(pid))
    if not st:
        return None
    return sum(v[0] for v in st.values()), sum(v[1] for v in st.values())


@dataclass
class CpuSnapshot:
    """Cumulative CPU seconds at one instant (cpu_snapshot)."""
    mono: float
    host_busy_s: float
    host_idle_s: float
    steal_s: list[float]                     # per CPU
    server_s: float | None
    tracer_s: float
    clients_s: dict[int, float | None]
    clients_sched: dict[int, tuple[int, int] | None]  # (on-CPU ns, run-queue ns)


@dataclass
class MeasuredClient:
    """What a window's CPU accounting needs of the measured client (workload.benchmark.measured_client)."""
    cpu_s: float = 0.0
    wait_s: float | None = None       # its time waiting for a CPU, over its life
    lifetime_s: float | None = None


def cpu_snapshot(server_pid: int | None, client_pids=()) -> CpuSnapshot:
    """Cumulative CPU seconds right now: the host's busy time (all CPUs, /proc/stat), the server
    process's, valkeytrace's own, and each live client process's (for a window's CPU accounting),
    with each client's time waiting for a CPU (schedstat)."""
    import psutil

    t = psutil.cpu_times()
    busy = sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal"))
    # the CPUs' idle time: measured at each idle entry and exit on a tickless kernel, where the busy
    # columns are sampled at the tick and missed 0.35 of a core of the clients' short bursts (0.25
    # sampled busy against 0.63 not idle on their CPU, 1 s samples, a read-heavy window)
    idle = getattr(t, "idle", 0.0) + getattr(t, "iowait", 0.0)
    # per CPU, the time the hypervisor ran something else while the CPU had work (steal): the
    # kernel leaves it out of a task's charged runtime (PARAVIRT_TIME_ACCOUNTING), the switches do not
    steal = [getattr(c, "steal", 0.0) for c in psutil.cpu_times(percpu=True)]

    def proc_cpu(pid):
        try:
            c = psutil.Process(pid).cpu_times()
            return c.user + c.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError, ValueError):
            return None
    me = os.times()
    return CpuSnapshot(time.monotonic(), busy, idle, steal, proc_cpu(server_pid), me.user + me.system,
                       {pid: proc_cpu(pid) for pid in client_pids}, {pid: process_schedstat(pid) for pid in client_pids})


def cpu_window(a: CpuSnapshot, b: CpuSnapshot, measured: MeasuredClient | None = None):
    """Cores used over the window between two cpu_snapshot()s (a recording.model.HostCpu, None for no
    time): host, server, clients (those alive at both ends, plus the measured client's), valkeytrace,
    and everything else; and the share of their time the clients spent waiting for a CPU
    (clients_cpu_wait: the measured client over its life, the background clients over the window)."""
    from valkeytrace.recording.model import CpuWait, HostCpu

    m = measured or MeasuredClient()
    wall = b.mono - a.mono
    if wall <= 0:
        return None
    both = [(v, b.clients_s.get(p)) for p, v in a.clients_s.items()]
    clients = m.cpu_s + sum(y - x for x, y in both if x is not None and y is not None)
    server = (b.server_s - a.server_s) if a.server_s is not None and b.server_s is not None else None
    host = b.host_busy_s - a.host_busy_s
    if a.steal_s:
        host = max(host, len(a.steal_s) * wall - (b.host_idle_s - a.host_idle_s))  # a steal figure per CPU
    tracer = b.tracer_s - a.tracer_s
    other = host - (server or 0.0) - clients - tracer
    out = HostCpu(cpus=os.cpu_count(), wall_s=round(wall, 3), host_cores=round(host / wall, 3),
                  server_cores=None if server is None else round(server / wall, 3),
                  clients_cores=round(clients / wall, 3), tracer_cores=round(tracer / wall, 3),
                  other_cores=round(max(0.0, other) / wall, 3))
    if a.steal_s and b.steal_s and len(a.steal_s) == len(b.steal_s):
        out.steal_ms_by_cpu = [round(1000 * max(0.0, y - x), 1) for x, y in zip(a.steal_s, b.steal_s)]
    wait = CpuWait()
    if m.lifetime_s and m.wait_s is not None:
        wait.measured = round(min(1.0, m.wait_s / m.lifetime_s), 4)
    sa, sb = a.clients_sched, b.clients_sched
    pairs = [(v, sb.get(p)) for p, v in sa.items()]
    bg = [(y[1] - x[1]) / 1e9 / wall for x, y in pairs if x is not None and y is not None]
    if bg:
        wait.background = round(min(1.0, sum(bg) / len(bg)), 4)
    if wait.measured is not None or wait.background is not None:
        out.clients_cpu_wait = wait
    return out


def format_cpu_list(cpus) -> str:
    """(0, 2, 3) -> '0,2-3' (the kernel's cpu-list format)"""
    cpus = sorted(cpus)
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def _die_with_parent():  # in the child, after fork and any uid change, before exec
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def own_process_group() -> dict:
    """Popen keyword arguments that put a child (server, benchmark client) in a process group of
    its own, so that Ctrl-C at the terminal reaches valkeytrace only and it stops the child itself,
    while the child stays in valkeytrace's session: the scheduler's autogroup then weighs it
    against the user's other processes (a CPU hog started beside it, say) task for task, as it
    would a server and client started by hand. Before Python 3.11: a session of its own."""
    import sys

    # and SIGTERM when valkeytrace dies, even by SIGKILL: a launched server is never left behind
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
    return {**group, "preexec_fn": _die_with_parent}


def peak_rss_kb() -> int:
    """This process's peak resident memory since its exec (VmHWM, /proc/self/status). Not getrusage's
    ru_maxrss: the kernel carries the image a process was exec'd from into it, so a tracer started by a
    large process (a test worker, a shell's python) would report its parent's peak as its own."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def release_free_memory() -> None:
    """Give the heap's free pages back to the kernel (glibc malloc_trim). After the probes compile,
    LLVM's freed working memory (~17 MB) otherwise stays resident under whatever the recording
    allocates next, and the tracer's peak RSS is the sum of both. No-op off glibc."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def lower_thread_priority():
    """Nice 19 for the calling thread (and the threads it starts). The tracer's housekeeping
    (ring-buffer polls, /proc refreshes) should not take a CPU from the traced server's threads
    each time it wakes, on a machine the benchmark saturates. Not for the loop sampler: a late
    wake-up there would leave its uprobe attached longer than its duty."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:
        pass
