"""What the model reads from a recording: a cell's runs, the calls of the thread that makes writes
durable (as the kernel timed them), the CPU per request (the GET-only passes, else the windows'
schedstat), the wake-ups and stalls, and who makes writes durable. Pure readers of the typed
recording (analysis/calibration.py assembles them into the model's parameters)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from valkeytrace.histogram import LatencyHistogram
from valkeytrace.pipeline.params import Interference, Sampler
from valkeytrace.recording.model import Demand, Document, HostCpu, Run, ServerWindow, ThreadRecord, decode, decode_as

SYNC_CALLS = ("fdatasync", "fsync")
AOF = "aof_write"
MAX_SAMPLES = 4000        # call lengths kept per distribution (evenly thinned)
# Values up to this size cost a GET about the same CPU: a recording's GET-only passes of those sizes are
# pooled as draws of the host's CPU per request (a compare records one pass per size and launch).
POOL_MAX_BYTES = 1024
EVERYSEC_INTERVAL_US = 1e6  # appendfsync everysec: a background fdatasync at most once a second
NO_FSYNC_INTERVAL_US = 1e12  # appendfsync no: the server never fdatasyncs (a job never due inside a window)
GET, SET = "get", "set"     # INFO commandstats' names


class CalibrationError(ValueError):
    """The recording cannot calibrate the model (one line: why)."""


@dataclass(frozen=True)
class Durable:
    """Who makes a recording's writes durable: the main thread ("main": appendfsync always), or an
    offload ("durable": replies to writes held until durable; "early-ack": not held), emulated by
    valkeytrace's shim or the server's own (#3381's, everysec's bio_aof); with everysec, its jobs at
    most once a second."""
    mode: str
    emulated: bool = False
    job_interval_us: float = 0.0


def durable_by(doc: Document) -> Durable:
    """The one answer to who makes writes durable, for calibration, the what-if and the CLI."""
    emu = doc.emulation.offload
    if emu and emu.mode:
        return Durable(emu.mode, emulated=True)
    if doc.server.bio_aof_offload:
        return Durable("durable")
    if doc.server.appendfsync == "everysec":
        return Durable("early-ack", job_interval_us=EVERYSEC_INTERVAL_US)
    if doc.server.appendfsync == "no":
        return Durable("early-ack", job_interval_us=NO_FSYNC_INTERVAL_US)
    return Durable("main")


@dataclass(frozen=True)
class PassCost:
    """One GET-only pass's host CPU per request (µs), and the pass itself."""
    server_us: float
    client_us: float
    size: int = 0         # its value size (B)
    p99_us: float = 0.0
    clients: int = 0
    seconds: float = 0.0

    @property
    def total_us(self) -> float:
        return self.server_us + self.client_us


def _rate(r: Run) -> float | None:
    return r.load.rate if r.load else None


def cell_runs(doc: Document, workload: str, size: int, rate: float | None = None) -> list[Run]:
    """The cell's measured runs with a server-side trace: at `rate` (open loop), or closed loop (None)."""
    return [r for r in doc.runs if r.workload == workload and r.value_size == size and r.status == "ok"
            and not r.fsync_extra_delay_ns and r.server and _rate(r) == rate]


def rates_of(doc, workload: str, size: int) -> list:
    """The cell's loads: None (closed loop) and each open-loop rate, in the recording's order."""
    return list(dict.fromkeys(_rate(r) for r in decode(doc).runs if r.workload == workload and r.value_size == size))


def all_rates(doc: Document, workload: str, size: int) -> list[Run]:
    return [r for rate in rates_of(doc, workload, size) for r in cell_runs(doc, workload, size, rate)]


def count(t: ThreadRecord, names) -> int:
    return sum(t.calls[c].count for c in names if c in t.calls)


def sync_thread(server: ServerWindow) -> ThreadRecord | None:
    """The thread whose fdatasync/fsync calls are most frequent in a window."""
    best, n = None, 0
    for t in server.threads:
        k = count(t, SYNC_CALLS)
        if k > n:
            best, n = t, k
    return best


def main_thread(server: ServerWindow) -> ThreadRecord | None:
    return next((x for x in server.threads if x.tid == server.main_tid), None)


def thin(values: list) -> tuple:
    if len(values) <= MAX_SAMPLES:
        return tuple(values)
    idx = np.linspace(0, len(values) - 1, MAX_SAMPLES).astype(int)
    return tuple(np.asarray(values)[idx])


def call_lengths(runs: list, names: tuple, thread: str = "sync") -> tuple[tuple, str]:
    """(lengths µs, source) of the calls `names` on the durability thread (thread='sync') or the main
    thread, from the timeline's call events, else from the histograms' buckets."""
    vals, hist = [], LatencyHistogram()
    for r in runs:
        s = decode_as(r, Run).server
        t = (sync_thread(s) if thread == "sync" else main_thread(s)) if s else None
        if s is None or t is None:
            continue
        for e in s.blocked_timeline.events:
            if e[4] == "call" and e[2] == t.tid and e[3] in names:
                vals.append(e[1] / 1e3)
        for name in names:
            rec = t.calls.get(name)
            if rec and rec.count:
                hist.merge(LatencyHistogram.from_record(rec))
    if vals:
        return thin(vals), f"{len(vals)} calls timed by the kernel (eBPF timeline)"
    if not hist.count:
        return (), "none recorded"
    counts = hist.bucket_counts
    bounds = LatencyHistogram.bucket_bounds().astype(np.float64)
    nz = np.flatnonzero(counts)
    mids = (bounds[nz, 0] + bounds[nz, 1]) / 2 / 1e3
    reps = np.repeat(mids, counts[nz].astype(np.int64))
    return thin(list(reps)), f"{hist.count} calls in the tracer's histograms (bucket midpoints)"


def sync_cpu(runs: list[Run]) -> float | None:
    """µs of CPU a sync call takes on its thread: its length less its off-CPU time inside it."""
    total = off = 0.0
    n = 0
    for r in runs:
        t = sync_thread(r.server) if r.server else None
        if not t or not t.off_cpu_ns:
            continue
        for c in SYNC_CALLS:
            rec = t.calls.get(c)
            if rec and rec.count:
                total += rec.sum_ns
                n += rec.count
                off += sum((t.off_cpu_ns.get(c) or {}).values())
    return max(0.0, (total - off) / n / 1e3) if n else None


def passes_of(doc: Document, size: int) -> list[Demand]:
    """The GET-only passes recorded before the read-heavy windows of this size."""
    return [r.demand for r in all_rates(doc, "read-heavy", size) if r.demand and r.demand.tps and r.demand.host_cpu]


def pass_cost(p: Demand, size: int = 0) -> PassCost:
    per, cpu = (p.seconds or 0) * 1e6 / (p.requests or 1), p.host_cpu or HostCpu()
    return PassCost((cpu.server_cores or 0.0) * per, (cpu.clients_cores or 0.0) * per, size, float(p.p99_us or 0.0),
                    int(p.clients or 0), float(p.seconds or 0.0))


def pooled_sizes(doc: Document, size: int) -> list[int]:
    """The sizes whose GET-only passes are draws of this cell's host: every read-heavy size's when none is
    over POOL_MAX_BYTES, else this size's."""
    sizes = sorted({r.value_size for r in doc.runs if r.workload == "read-heavy"})
    return sizes if sizes and max(sizes) <= POOL_MAX_BYTES else [size]


def pooled_passes(doc: Document, size: int) -> list[PassCost]:
    """The passes that are draws of this cell's CPU per request (pooled_sizes)."""
    return [pass_cost(p, s) for s in pooled_sizes(doc, size) for p in passes_of(doc, s)]


def set_extra_us(doc: Document, size: int) -> tuple[float, str]:
    vals = []
    for r in all_rates(doc, "read-heavy", size) + all_rates(doc, "write-only", size):
        cs = r.server_view.commandstats
        st, gt = cs.get(SET), cs.get(GET)
        if st and gt and st.usec_per_call is not None and gt.usec_per_call is not None:
            vals.append(st.usec_per_call - gt.usec_per_call)
    if not vals:
        return 0.0, "no commandstats of both GET and SET: taken as 0"
    return max(0.0, float(np.median(vals))), "INFO commandstats: SET's usec_per_call less GET's"


def exec_us(doc: Document, size: int) -> float | None:
    """What the main thread keeps of a GET under I/O threads (the command's execution): INFO commandstats'
    usec_per_call of GET, the median over the cell's size's windows (None without it)."""
    vals = []
    for r in all_rates(doc, "read-heavy", size) + all_rates(doc, "write-only", size):
        cs = r.server_view.commandstats.get(GET)
        if cs and cs.usec_per_call is not None:
            vals.append(cs.usec_per_call)
    return float(np.median(vals)) if vals else None


def window_costs(runs: list[Run], sync_cpu_us: float) -> list[PassCost]:
    """Without a GET-only pass: each window's server and client µs per request (schedstat)."""
    out = []
    for r in runs:
        if r.server is None:
            continue
        w = r.server.window_ns / 1e9
        main = main_thread(r.server)
        n = sum((o.tps or 0) * w for o in r.ops.values())
        measured = next((o for o in r.ops.values() if o.role == "measured"), None)
        if not main or not main.sched or not n or not measured or not measured.client_cpu_s or not measured.requests:
            continue
        srv = (main.sched.on_cpu_ns / 1e3 - count(main, SYNC_CALLS) * sync_cpu_us) / n
        out.append(PassCost(max(1.0, srv), max(1.0, measured.client_cpu_s * 1e6 / measured.requests)))
    if not out:
        raise CalibrationError("no per-request CPU figures in the recording (no GET-only pass, no schedstat)")
    return out


def main_share(runs: list[Run], sync_cpu_us: float) -> float | None:
    """Under I/O threads: the main thread's share of the server threads' CPU per request (schedstat over
    the windows, the sync calls' own CPU left out); None without I/O threads' figures."""
    shares = []
    for r in runs:
        s = r.server
        main = main_thread(s) if s else None
        io = [t for t in (s.threads if s else []) if t.role == "io_thread" and t.sched]
        if not main or not main.sched or not io:
            continue
        m = max(0.0, main.sched.on_cpu_ns / 1e3 - count(main, SYNC_CALLS) * sync_cpu_us)
        total = m + sum(t.sched.on_cpu_ns for t in io if t.sched) / 1e3
        if total:
            shares.append(m / total)
    return float(np.median(shares)) if shares else None


def wake_us(runs: list[Run]) -> float:
    vals = []
    for r in runs:
        main = main_thread(r.server) if r.server else None
        cycles = r.server.eventloop.cycles if r.server and r.server.eventloop else None
        if main and main.sched and cycles:
            vals.append(main.sched.runqueue_ns / 1e3 / (2 * cycles))
    return float(np.median(vals)) if vals else 0.0


def aof_bytes_per_set(runs: list[Run]) -> float | None:
    """AOF bytes written per SET over the windows (None: not measured)."""
    vals = []
    for r in runs:
        if r.server is None:
            continue
        w = r.server.window_ns / 1e9
        sets = r.ops["SET"].tps if "SET" in r.ops else None
        nbytes = sum(t.calls[AOF].bytes or 0 for t in r.server.threads if AOF in t.calls)
        if sets and nbytes:
            vals.append(nbytes / (sets * w))
    return float(np.median(vals)) if vals else None


@dataclass(frozen=True)
class Stalls:
    """What else takes the CPUs over some windows: on the server's (the main thread's runnable intervals
    and the rest of its run-queue time) and on the clients'."""
    server: Interference
    clients: Interference
    long_stalls: int
    threshold_us: float


def stalls_of(runs: list[Run], passes: list[Demand]) -> Stalls | None:
    """The main thread's runnable intervals (the timeline's, at least its threshold long) per second it
    wanted the CPU (on it or runnable, schedstat), and the rest of its run-queue time as stalls of the
    threshold's half; the clients' share of time waiting for a CPU over the GET-only passes
    (schedstat), in stalls of the server's lengths (the clients' own are not recorded). None without the
    main thread's schedstat."""
    stalls, want_ns, rq_ns, long_ns, threshold = [], 0.0, 0.0, 0.0, 100.0
    for r in runs:
        s = r.server
        main = main_thread(s) if s else None
        if s is None or not main or not main.sched:
            continue
        want_ns += main.sched.on_cpu_ns + main.sched.runqueue_ns
        rq_ns += main.sched.runqueue_ns
        threshold = (s.blocked_timeline.threshold_ns or 100_000) / 1e3
        for e in s.blocked_timeline.events:
            if e[4] == "runnable" and e[2] == s.main_tid:
                stalls.append(e[1] / 1e3)
                long_ns += e[1]
    if not want_ns:
        return None
    short_us = threshold / 2
    n_short = max(0.0, rq_ns - long_ns) / 1e3 / short_us
    values = thin(stalls + [short_us] * int(round(n_short)))
    server = Interference((len(stalls) + n_short) / (want_ns / 1e9), Sampler(values))
    waits = [w for p in passes if p.host_cpu and p.host_cpu.clients_cpu_wait
             if (w := p.host_cpu.clients_cpu_wait.measured) is not None]
    stall = Sampler(thin(stalls) or values)
    mean_us = float(np.mean(stall.values_us)) if stall.values_us else 0.0
    rate = float(np.median(waits)) / (mean_us / 1e6) if waits and mean_us else 0.0
    return Stalls(server, Interference(rate, stall), len(stalls), threshold)


def repeated(doc: Document) -> dict:
    """{"tps", "p50_us", "p99_us": [[a fixed load's figure over its repeats], ...], "names": ["pass" or "cell", ...],
    "cpu": [[a fixed load's host CPU per request (µs) over its repeats], ...]}: the recording's GET-only
    passes (by size) and each closed-loop cell's measured op over its windows (launch by launch in a
    compare)."""
    groups: dict = {"tps": [], "p50_us": [], "p99_us": [], "names": [], "cpu": []}
    cells: dict = {}
    cpu: dict = {}
    for r in doc.runs:
        if r.status != "ok" or r.workload not in ("read-heavy", "write-only") or r.fsync_extra_delay_ns or _rate(r):
            continue
        op = "GET" if r.workload == "read-heavy" else "SET"
        key = (r.workload, r.value_size, r.launch)
        if op in r.ops:
            cells.setdefault(("cell", *key), []).append((r.ops[op].tps, r.ops[op].p50_us, r.ops[op].p99_us))
            n = sum(o.tps or 0 for o in r.ops.values())
            h = r.host_cpu
            if h and h.server_cores is not None and h.clients_cores is not None and n:
                cpu.setdefault(key, []).append((h.server_cores + h.clients_cores) * 1e6 / n)
        if r.demand and r.demand.tps:
            cells.setdefault(("pass", r.value_size, r.launch), []).append((r.demand.tps, r.demand.p50_us, r.demand.p99_us))
            if r.demand.host_cpu:
                cpu.setdefault(("pass", r.value_size, r.launch), []).append(pass_cost(r.demand).total_us)
    groups["cpu"] = list(cpu.values())
    for key, figs in cells.items():
        groups["names"].append(key[0])
        groups["tps"].append([f[0] for f in figs if f[0]])
        groups["p50_us"].append([f[1] for f in figs if f[1]])
        groups["p99_us"].append([f[2] for f in figs if f[2]])
    return groups
