"""The pipeline model (valkeytrace.pipeline) calibrated from one recording: every parameter taken from
the recording's own figures, each kept with its source (Calibration.inputs), so that a prediction
says what it stands on.

Where each figure comes from (one cell: a workload and a value size):
- the fdatasync a write waits for: every call of the thread that makes writes durable (the main
  thread under appendfsync always, vt_offload under the virtual offload), as the kernel timed it
  (the eBPF timeline's call events; the histogram's buckets without them), and its own CPU (the call's
  length less the time it was switched out inside it); the AOF write()s alike;
- the injected delay (record --inject-fsync-delay): subtracted from each call and the new one added;
- the server's and the clients' CPU per request: the GET-only pass recorded before each read-heavy
  window (the host's CPU accounting over it, per request), in each of the host's modes when the passes
  ran in two (analysis/modes.py); a SET's extra from the server's own commandstats; without that pass,
  the window's schedstat figures per request;
- a thread's wake-up: the main thread's run-queue time (schedstat) per sleep (two a loop iteration);
- what else takes a CPU: stalls as long as the main thread's runnable intervals in the kernel's
  timeline, at a rate fitted so that the GET-only pass's p99 comes out as measured (the one figure the
  model is fitted to; calibration.fitted says so).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from valkeytrace.analysis.modes import (MODE_GAP, POOL_MAX_BYTES, PRIOR_RUNS, SLOW_SHARE_VM, ModeCost, PassCost,
                                        split, weights)
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.pipeline.params import (ClientCosts, Durability, Group, Interference, Jitter, Params, Sampler,
                                         ServerCosts)
from valkeytrace.pipeline.sim import simulate
from valkeytrace.recording.model import Demand, Document, HostCpu, Run, ServerWindow, ThreadRecord, decode, decode_as

SYNC_CALLS = ("fdatasync", "fsync")
MAX_SAMPLES = 4000        # call lengths kept per distribution (evenly thinned)
FIT_RUNS = 3              # simulated GET-only passes per step of the interference fit
FIT_STEPS = 10
JITTER_MAX = 0.05          # at most this share of the replies delayed
SPLIT = 0.5               # a request's CPU between its read and its reply


_PLACEHOLDER = Params((), ServerCosts({}, 0.0), ClientCosts(0.0, 0.0), Durability("main", Sampler(()), Sampler(())))


class CalibrationError(ValueError):
    """The recording cannot calibrate the model (one line: why)."""


@dataclass
class Input:
    """One figure the model stands on, with its unit and where it came from."""
    value: object
    unit: str
    source: str


@dataclass
class Measured:
    """A cell's op as the recording measured it (the medians of its runs)."""
    tps: float | None = None
    p50_us: float | None = None
    p95_us: float | None = None
    p99_us: float | None = None
    mean_us: float | None = None
    clients: int | None = None

    def get(self, metric: str):
        return getattr(self, metric, None)


@dataclass
class Calibration:
    workload: str
    value_size: int
    params: Params
    inputs: dict = field(default_factory=dict)     # name -> Input
    injected_ns: float = 0.0                        # the recording's own injected fsync delay (median)
    measured: dict = field(default_factory=dict)    # op -> Measured
    fitted: list = field(default_factory=list)      # the parameters fitted to the recording, not measured
    modes: list = field(default_factory=list)       # [Mode]: the host's modes in the GET-only passes (modes.py)

    def put(self, name: str, value, unit: str, source: str) -> None:
        self.inputs[name] = Input(round(value, 3) if isinstance(value, float) else value, unit, source)

    def value(self, name: str) -> float:
        return float(self.inputs[name].value)

    def in_mode(self, mode: "Mode") -> "Calibration":
        """This calibration with a mode's CPU per request."""
        return replace(self, params=replace(self.params, server=mode.server, client=mode.client))


@dataclass(frozen=True)
class Mode:
    """A mode of the host (modes.ModeCost) and the server's and clients' costs the model takes in it."""
    cost: ModeCost
    weight: float             # modes.weights: the chance a cell, the median of its repeats, comes out in it
    server: ServerCosts
    client: ClientCosts


def _rate(r: Run) -> float | None:
    return r.load.rate if r.load else None


def cell_runs(doc: Document, workload: str, size: int, rate: float | None = None) -> list[Run]:
    """The cell's measured runs with a server-side trace: at `rate` (open loop), or closed loop (None)."""
    return [r for r in doc.runs if r.workload == workload and r.value_size == size and r.status == "ok"
            and not r.fsync_extra_delay_ns and r.server and _rate(r) == rate]


def rates_of(doc, workload: str, size: int) -> list:
    """The cell's loads: None (closed loop) and each open-loop rate, in the recording's order."""
    return list(dict.fromkeys(_rate(r) for r in decode(doc).runs if r.workload == workload and r.value_size == size))


def _all_rates(doc: Document, workload: str, size: int) -> list[Run]:
    return [r for rate in rates_of(doc, workload, size) for r in cell_runs(doc, workload, size, rate)]


def _count(t: ThreadRecord, names) -> int:
    return sum(t.calls[c].count for c in names if c in t.calls)


def _sync_thread(server: ServerWindow) -> ThreadRecord | None:
    """The thread whose fdatasync/fsync calls are most frequent in a window."""
    best, n = None, 0
    for t in server.threads:
        k = _count(t, SYNC_CALLS)
        if k > n:
            best, n = t, k
    return best


def _main(server: ServerWindow) -> ThreadRecord | None:
    return next((x for x in server.threads if x.tid == server.main_tid), None)


def _thin(values: list) -> tuple:
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
        t = (_sync_thread(s) if thread == "sync" else _main(s)) if s else None
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
        return _thin(vals), f"{len(vals)} calls timed by the kernel (eBPF timeline)"
    if not hist.count:
        return (), "none recorded"
    counts = hist.bucket_counts
    bounds = LatencyHistogram.bucket_bounds().astype(np.float64)
    nz = np.flatnonzero(counts)
    mids = (bounds[nz, 0] + bounds[nz, 1]) / 2 / 1e3
    reps = np.repeat(mids, counts[nz].astype(np.int64))
    return _thin(list(reps)), f"{hist.count} calls in the tracer's histograms (bucket midpoints)"


def _sync_cpu(runs: list[Run]) -> float | None:
    """µs of CPU a sync call takes on its thread: its length less its off-CPU time inside it."""
    total = off = 0.0
    n = 0
    for r in runs:
        t = _sync_thread(r.server) if r.server else None
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
    return [r.demand for r in _all_rates(doc, "read-heavy", size) if r.demand and r.demand.tps and r.demand.host_cpu]


def pass_cost(p: Demand, size: int = 0) -> PassCost:
    per, cpu = (p.seconds or 0) * 1e6 / (p.requests or 1), p.host_cpu or HostCpu()
    return PassCost((cpu.server_cores or 0.0) * per, (cpu.clients_cores or 0.0) * per, size)


def _mode_passes(doc: Document, size: int) -> list[PassCost]:
    """The passes that tell the host's modes: every read-heavy size's when none is over POOL_MAX_BYTES,
    else this size's."""
    sizes = sorted({r.value_size for r in doc.runs if r.workload == "read-heavy"})
    pooled = sizes if sizes and max(sizes) <= POOL_MAX_BYTES else [size]
    return [pass_cost(p, s) for s in pooled for p in passes_of(doc, s)]


def _set_extra_us(doc: Document, size: int) -> tuple[float, str]:
    vals = []
    for r in _all_rates(doc, "read-heavy", size) + _all_rates(doc, "write-only", size):
        cs = r.server_view.commandstats
        st, gt = cs.get(SET), cs.get(GET)
        if st and gt and st.usec_per_call is not None and gt.usec_per_call is not None:
            vals.append(st.usec_per_call - gt.usec_per_call)
    if not vals:
        return 0.0, "no commandstats of both GET and SET: taken as 0"
    return max(0.0, float(np.median(vals))), "INFO commandstats: SET's usec_per_call less GET's"


GET, SET = "get", "set"  # INFO commandstats' names


def _window_costs(runs: list[Run], sync_cpu: float) -> tuple[float, float]:
    """Without a GET-only pass: server and client µs per request from the windows (schedstat)."""
    srv, cli = [], []
    for r in runs:
        if r.server is None:
            continue
        w = r.server.window_ns / 1e9
        main = _main(r.server)
        n = sum((o.tps or 0) * w for o in r.ops.values())
        if not main or not main.sched or not n:
            continue
        srv.append((main.sched.on_cpu_ns / 1e3 - _count(main, SYNC_CALLS) * sync_cpu) / n)
        measured = next((o for o in r.ops.values() if o.role == "measured"), None)
        if measured and measured.client_cpu_s and measured.requests:
            cli.append(measured.client_cpu_s * 1e6 / measured.requests)
    if not srv or not cli:
        raise CalibrationError("no per-request CPU figures in the recording (no GET-only pass, no schedstat)")
    return max(1.0, float(np.median(srv))), max(1.0, float(np.median(cli)))


def _costs(cal: Calibration, runs: list[Run], passes: list[PassCost], sync_cpu: float,
           set_extra: tuple[float, str]) -> tuple[ServerCosts, ClientCosts]:
    """Per-request CPU: the totals from the GET-only pass (the regime of a loaded server), else the
    windows' schedstat per request; split in halves between a request's read and its reply (no figure
    splits them: the write-only windows' request timestamps put 30-40% of the server's in the read, but
    with that split the model puts the baselines' requests on a path one fsync cycle shorter than they
    took: docs/explain.md §3)."""
    extra, extra_src = set_extra
    wake = _wake_us(runs)
    repeats = len(runs)  # the cell's figure is the median of its runs
    found, own = split(passes, cal.value_size), [p for p in passes if p.size == cal.value_size] or passes
    sizes = (f" of {', '.join(str(s) for s in sorted({p.size for p in passes}))} B" if len(own) < len(passes)
             else "")
    if found:
        srv, cli = found[0].server_us, found[0].client_us
        src = (f"the GET-only pass before each read-heavy window ({len(own)}): host CPU per request" if len(found) < 2
               else f"the host's fast mode ({found[0].passes} of {len(passes)} GET-only passes{sizes}; this size's "
               "where one ran in it): host CPU per request")
        cal.modes = [Mode(m, w, *_cost_params(m.server_us, m.client_us, extra, wake, sync_cpu))
                     for m, w in zip(found, weights(found, repeats))]
    else:
        srv, cli = _window_costs(runs, sync_cpu)
        src = "the windows' schedstat per request (no GET-only pass recorded)"
    cal.put("server_us_per_get", srv, "µs", f"{src} (the server's threads)")
    cal.put("client_us_per_request", cli, "µs", f"{src} (the benchmark clients)")
    for slow in found[1:]:
        cal.put("server_us_per_get_slow", slow.server_us, "µs", f"the {slow.passes} of {len(passes)} GET-only "
                f"passes{sizes} {MODE_GAP - 1:.0%} or more above the cheapest (the host's slow mode; this size's where one ran in it; "
                "analysis/modes.py)")
        cal.put("client_us_per_request_slow", slow.client_us, "µs", "the same passes (the benchmark clients)")
        cal.put("slow_mode_weight", cal.modes[1].weight, "", f"the chance a cell, the median of its {repeats} "
                f"repeats, comes out in the slow mode: each repeat slow with {slow.passes} of {len(passes)} passes' "
                f"share taken with this VM's ({SLOW_SHARE_VM:.0%}, as {PRIOR_RUNS} passes more; analysis/modes.py)")
    cal.put("server_us_set_extra", extra, "µs", extra_src)
    cal.put("wake_us", wake, "µs", "the main thread's run-queue time (schedstat) per sleep, two a loop iteration")
    return _cost_params(srv, cli, extra, wake, sync_cpu)


def _cost_params(srv: float, cli: float, extra: float, wake: float, sync_cpu: float) -> tuple[ServerCosts, ClientCosts]:
    read = srv * SPLIT
    server = ServerCosts(read_us={"GET": read, "SET": read + extra, "PING": read}, write_us=srv - read,
                         wake_us=wake, deliver_us=srv - read, sync_cpu_us=sync_cpu,
                         exec_us={"GET": read * 0.4, "SET": read * 0.4 + extra},
                         io_read_us=read * 0.6, io_write_us=srv - read)
    return server, ClientCosts(read_us=cli * SPLIT, write_us=cli * (1 - SPLIT), wake_us=wake)


def _wake_us(runs: list[Run]) -> float:
    vals = []
    for r in runs:
        main = _main(r.server) if r.server else None
        cycles = r.server.eventloop.cycles if r.server and r.server.eventloop else None
        if main and main.sched and cycles:
            vals.append(main.sched.runqueue_ns / 1e3 / (2 * cycles))
    return float(np.median(vals)) if vals else 0.0


def _median_op(runs: list[Run], op: str) -> Measured:
    vals = [r.ops[op] for r in runs if op in r.ops]
    out = Measured()
    for k in ("tps", "p50_us", "p95_us", "p99_us", "mean_us", "clients"):
        xs = [getattr(v, k) for v in vals if getattr(v, k) is not None]
        setattr(out, k, float(np.median(xs)) if xs else None)
    if out.clients is not None:
        out.clients = int(out.clients)
    return out


def _mode(doc: Document) -> str:
    off = doc.emulation.offload.mode if doc.emulation.offload else None
    if off:
        return off
    if doc.server.bio_aof_offload:
        return "durable"
    if doc.server.appendfsync not in (None, "always"):
        raise CalibrationError(f"the model covers appendfsync always and its offload; this recording's server runs "
                               f"appendfsync {doc.server.appendfsync}")
    return "main"


def groups_for(workload: str, get_clients: int, set_clients: int, write_clients: int) -> tuple:
    if workload == "read-heavy":
        return (Group("GET", get_clients), Group("SET", set_clients, measured=False)) if set_clients else \
            (Group("GET", get_clients),)
    return (Group("SET", write_clients),)


def calibrate(doc, workload: str, size: int, rate: float | None = None) -> Calibration:
    """The model of one cell of a recording, as recorded: its closed loop, or its open loop at `rate`
    (the costs, the calls and the stalls from those runs; the clients' the GET-only passes' if any)."""
    doc = decode(doc)
    runs = cell_runs(doc, workload, size, rate)
    if not runs:
        at = f" at {rate:,.0f}/s" if rate else ""
        raise CalibrationError(f"no measured {workload} {size} B run{at} with a server-side trace to calibrate from")
    mode = _mode(doc)
    sync, sync_src = call_lengths(runs, SYNC_CALLS)
    if not sync:
        raise CalibrationError(f"{workload} {size} B: no fdatasync/fsync was timed (a trace of the server's "
                               "threads is needed: --backend ebpf or shim)")
    aof, aof_src = call_lengths(runs, ("aof_write",))
    injected = float(doc.emulation.fsync_delay.median_ns or 0.0)
    measured = {op: _median_op(runs, op) for op in ("GET", "SET") if any(op in r.ops for r in runs)}
    cal = Calibration(workload, size, params=_PLACEHOLDER, injected_ns=injected, measured=measured)
    sync_cpu = _sync_cpu(runs)
    cal.put("sync_us_p50", float(np.median(sync)), "µs", f"{sync_src}, on the thread that makes writes durable")
    cal.put("sync_cpu_us", sync_cpu or 0.0, "µs", "each sync call's length less its off-CPU time inside it (eBPF)"
            if sync_cpu is not None else "not measured (no off-CPU figures): taken as 0")
    cal.put("aof_write_us_p50", float(np.median(aof)) if aof else 0.0, "µs", aof_src)
    cal.put("injected_fsync_delay_us", injected / 1e3, "µs", "the recording's --inject-fsync-delay" if injected else
            "none injected")
    passes = passes_of(doc, size)
    server, client = _costs(cal, runs, _mode_passes(doc, size), sync_cpu or 0.0, _set_extra_us(doc, size))
    bytes_per_set = _aof_bytes_per_set(cell_runs(doc, "write-only", size) or runs)
    cal.put("aof_bytes_per_set", bytes_per_set, "bytes", "AOF bytes written per SET in the windows (eBPF)")
    cal.params = Params(groups=_groups(doc, workload, measured, runs, rate), server=server, client=client,
                        durability=Durability(mode, Sampler(sync, 0.0, sync_cpu or 0.0), Sampler(aof),
                                              float((doc.emulation.offload.gather_ns if doc.emulation.offload else 0)
                                                    or 0) / 1e3),
                        io_threads=int(doc.server.io_threads or 1), keyspace=int(doc.settings.keyspace or 100000),
                        value_size=size, aof_bytes_per_write=bytes_per_set,
                        duration_s=float(doc.settings.duration_s or 2.0))
    _interference(cal, runs, passes)
    _fit_jitter(cal, passes)
    return cal


def _groups(doc: Document, workload: str, measured: dict, runs: list[Run], rate: float | None) -> tuple:
    """The benchmark processes as recorded (their clients from the runs, else the settings)."""
    st = doc.settings
    get, set_ = measured.get("GET"), measured.get("SET")
    g = (get.clients if get else None) or st.get_clients or 50
    bg = set_.clients if set_ and workload == "read-heavy" else None
    w = set_.clients if set_ and workload == "write-only" else None
    groups = groups_for(workload, int(g), int(bg if bg is not None else st.set_clients or 8), int(w or st.write_clients or 50))
    if rate:
        load = runs[0].load
        arrival = (load.arrival if load else None) or "poisson"
        pool = load.pool if load else "grow"  # its connections: the measured op's clients, as recorded (above)
        groups = tuple(replace(x, rate=rate, arrival=arrival, pool=pool) if x.measured else x for x in groups)
    return groups


def _aof_bytes_per_set(runs: list[Run]) -> float:
    vals = []
    for r in runs:
        if r.server is None:
            continue
        w = r.server.window_ns / 1e9
        sets = r.ops[OP_SET].tps if OP_SET in r.ops else None
        nbytes = sum(t.calls[AOF].bytes or 0 for t in r.server.threads if AOF in t.calls)
        if sets and nbytes:
            vals.append(nbytes / (sets * w))
    return float(np.median(vals)) if vals else 100.0


OP_SET, AOF = "SET", "aof_write"


def _interference(cal: Calibration, runs: list[Run], passes: list[Demand]) -> None:
    """What else takes the CPUs, from the kernel: on the server's, the main thread's runnable intervals
    (the timeline's, at least its threshold long) per second it wanted the CPU (on it or runnable,
    schedstat), and the rest of its run-queue time as stalls of the threshold's half; on the clients',
    the measured GET clients' share of time waiting for a CPU over the GET-only pass (schedstat), in
    stalls of the server's lengths (the clients' own lengths are not recorded)."""
    stalls, want_ns, rq_ns, long_ns, threshold = [], 0.0, 0.0, 0.0, 100.0
    for r in runs:
        s = r.server
        main = _main(s) if s else None
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
        cal.put("interference_per_s", 0.0, "1/s", "not measured (no schedstat of the main thread)")
        return
    short_us = threshold / 2
    n_short = max(0.0, rq_ns - long_ns) / 1e3 / short_us
    values = _thin(stalls + [short_us] * int(round(n_short)))
    rate = (len(stalls) + n_short) / (want_ns / 1e9)
    mean_us = float(np.mean(values)) if values else 0.0
    cal.params = replace(cal.params, interference=Interference(rate, Sampler(values)))
    cal.put("interference_per_s", rate, "1/s", f"the main thread's runnable intervals ({len(stalls)} of "
            f"{threshold:.0f} µs or more, the rest of its run-queue time as {short_us:.0f} µs ones) per second it "
            "wanted a CPU (schedstat)")
    cal.put("interference_stall_us_mean", mean_us, "µs", "their mean length")
    _client_interference(cal, passes, Sampler(_thin(stalls) or values))


def _client_interference(cal: Calibration, passes: list[Demand], stall: Sampler) -> None:
    """The clients' CPU stalls: their share of time waiting for a CPU over the GET-only pass (schedstat), in
    stalls as long as the main thread's (no timeline records the clients')."""
    waits = [w for p in passes if p.host_cpu and p.host_cpu.clients_cpu_wait
             if (w := p.host_cpu.clients_cpu_wait.measured) is not None]
    mean_us = float(np.mean(stall.values_us)) if stall.values_us else 0.0
    rate = float(np.median(waits)) / (mean_us / 1e6) if waits and mean_us else 0.0
    cal.params = replace(cal.params, client_interference=Interference(rate, stall))
    cal.put("client_interference_per_s", rate, "1/s", "the GET clients' share of time waiting for a CPU in the "
            "GET-only pass (schedstat), in stalls as long as the main thread's" if waits else "not measured")


OP_GET = "GET"


def _fit_jitter(cal: Calibration, passes: list) -> None:
    """The share of replies delayed on their way (an exponential delay whose mean puts the pass's p99
    where it was measured when 1% of them are), fitted so that the GET-only pass's p99 comes out as
    measured (the median of the passes'): the simulated passes' latencies, each delayed with that
    probability, by bisection. The one figure the model is fitted to: the tail the kernel's CPU
    accounting does not hold (its p50 and TPS are not fitted)."""
    if not passes:
        cal.put("jitter_share", 0.0, "", "not fitted (no GET-only pass)")
        return
    target = float(np.median([p.p99_us or 0 for p in passes]))
    clients = int(np.median([p.clients or 0 for p in passes]))
    seconds = float(np.median([p.seconds or 0 for p in passes]))  # a pass is a fixed count of requests
    base = replace(cal.params, groups=(Group("GET", clients),), duration_s=seconds, warmup_s=0.05)
    runs = [simulate(base, seed=7 + i).ops[OP_GET].latencies_us for i in range(FIT_RUNS)]
    p50 = float(np.median([np.percentile(x, 50) for x in runs]))
    p99 = float(np.median([np.percentile(x, 99) for x in runs]))
    if p99 >= target:
        cal.put("jitter_share", 0.0, "", f"fitted: none needed (the pass's p99 {target:.0f} µs, simulated {p99:.0f})")
        return
    mean = target - p50
    rng = np.random.default_rng(11)
    draws = [(rng.random(len(x)), rng.exponential(mean, len(x))) for x in runs]

    def p99_with(share: float) -> float:
        return float(np.median([np.percentile(x + np.where(u < share, e, 0.0), 99) for x, (u, e) in zip(runs, draws)]))
    lo, hi = 0.0, JITTER_MAX
    for _ in range(FIT_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p99_with(mid) < target else (lo, mid)
    share = round((lo + hi) / 2, 4)
    cal.params = replace(cal.params, jitter=Jitter(share, mean))
    cal.fitted.append("jitter_share")
    cal.put("jitter_share", share, "", f"fitted: the GET-only pass's p99 ({target:.0f} µs, the median of "
            f"{len(passes)}; {p99:.0f} simulated without) reproduced by delaying this share of the replies by an "
            f"exponential delay of mean {mean:.0f} µs")
