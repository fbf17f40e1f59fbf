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
  window (the host's CPU accounting over it, per request); a SET's extra from the server's own
  commandstats; without that pass, the window's schedstat figures per request;
- a thread's wake-up: the main thread's run-queue time (schedstat) per sleep (two a loop iteration);
- what else takes a CPU: stalls as long as the main thread's runnable intervals in the kernel's
  timeline, at a rate fitted so that the GET-only pass's p99 comes out as measured (the one figure the
  model is fitted to; calibration.fitted says so).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from valkeytrace.histogram import LatencyHistogram
from valkeytrace.pipeline.params import (ClientCosts, Durability, Group, Interference, Jitter, Params, Sampler,
                                         ServerCosts)
from valkeytrace.pipeline.sim import simulate

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
class Calibration:
    workload: str
    value_size: int
    params: Params
    inputs: dict = field(default_factory=dict)     # name -> {"value", "unit", "source"}
    injected_ns: float = 0.0                        # the recording's own injected fsync delay (median)
    measured: dict = field(default_factory=dict)    # op -> the cell's measured figures (median of runs)
    fitted: list = field(default_factory=list)      # the parameters fitted to the recording, not measured

    def put(self, name: str, value, unit: str, source: str) -> None:
        self.inputs[name] = {"value": round(value, 3) if isinstance(value, float) else value, "unit": unit,
                             "source": source}


def _cell_runs(doc: dict, workload: str, size: int, rate: float | None = None) -> list[dict]:
    """The cell's measured runs with a server-side trace: at `rate` (open loop), or closed loop (None)."""
    return [r for r in doc.get("runs", []) if r.get("workload") == workload and r.get("value_size") == size
            and r.get("status") == "ok" and not r.get("fsync_extra_delay_ns") and r.get("server")
            and (r.get("load") or {}).get("rate") == rate]


def rates_of(doc: dict, workload: str, size: int) -> list:
    """The cell's loads: None (closed loop) and each open-loop rate, in the recording's order."""
    return list(dict.fromkeys((r.get("load") or {}).get("rate") for r in doc.get("runs", [])
                              if r.get("workload") == workload and r.get("value_size") == size))


def _sync_thread(server: dict) -> dict | None:
    """The thread whose fdatasync/fsync calls are most frequent in a window."""
    best, n = None, 0
    for t in server.get("threads") or []:
        k = sum(((t.get("calls") or {}).get(c) or {}).get("count", 0) for c in SYNC_CALLS)
        if k > n:
            best, n = t, k
    return best


def _thin(values: list) -> tuple:
    if len(values) <= MAX_SAMPLES:
        return tuple(values)
    idx = np.linspace(0, len(values) - 1, MAX_SAMPLES).astype(int)
    return tuple(np.asarray(values)[idx])


def call_lengths(runs: list[dict], names: tuple, thread: str = "sync") -> tuple[tuple, str]:
    """(lengths µs, source) of the calls `names` on the durability thread (thread='sync') or the main
    thread, from the timeline's call events, else from the histograms' buckets."""
    vals, hist = [], LatencyHistogram()
    for r in runs:
        s = r["server"]
        t = _sync_thread(s) if thread == "sync" else next((x for x in s.get("threads") or []
                                                             if x.get("tid") == s.get("main_tid")), None)
        if t is None:
            continue
        for e in (s.get("blocked_timeline") or {}).get("events") or []:
            if e[4] == "call" and e[2] == t["tid"] and e[3] in names:
                vals.append(e[1] / 1e3)
        for name in names:
            rec = (t.get("calls") or {}).get(name)
            if rec and rec.get("count"):
                hist.merge(LatencyHistogram.from_dict(rec))
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


def _sync_cpu(runs: list[dict]) -> float | None:
    """µs of CPU a sync call takes on its thread: its length less its off-CPU time inside it."""
    total = off = n = 0
    for r in runs:
        t = _sync_thread(r["server"])
        if not t or not t.get("off_cpu_ns"):
            continue
        for c in SYNC_CALLS:
            rec = (t.get("calls") or {}).get(c)
            if rec and rec.get("count"):
                total += rec["sum_ns"]
                n += rec["count"]
                off += sum((t["off_cpu_ns"].get(c) or {}).values())
    return max(0.0, (total - off) / n / 1e3) if n else None


def _passes(doc: dict, size: int) -> list[dict]:
    """The GET-only passes recorded before the read-heavy windows of this size."""
    return [r["demand"] for rate in rates_of(doc, "read-heavy", size) for r in _cell_runs(doc, "read-heavy", size, rate)
            if isinstance(r.get("demand"), dict) and r["demand"].get("tps") and r["demand"].get("host_cpu")]


def _per_request(passes: list[dict], key: str) -> float:
    return float(np.median([p["host_cpu"][key] * p["seconds"] * 1e6 / p["requests"] for p in passes]))


def _set_extra_us(doc: dict, size: int) -> tuple[float, str]:
    vals = []
    for r in [r for w in ("read-heavy", "write-only") for rate in rates_of(doc, w, size)
              for r in _cell_runs(doc, w, size, rate)]:
        cs = (r.get("server_view") or {}).get("commandstats") or {}
        if "set" in cs and "get" in cs:
            vals.append(cs["set"]["usec_per_call"] - cs["get"]["usec_per_call"])
    if not vals:
        return 0.0, "no commandstats of both GET and SET: taken as 0"
    return max(0.0, float(np.median(vals))), "INFO commandstats: SET's usec_per_call less GET's"


def _window_costs(runs: list[dict], sync_cpu: float) -> tuple[float, float]:
    """Without a GET-only pass: server and client µs per request from the windows (schedstat)."""
    srv, cli = [], []
    for r in runs:
        s, w = r["server"], r["server"]["window_ns"] / 1e9
        main = next((t for t in s.get("threads") or [] if t.get("tid") == s.get("main_tid")), None)
        n = sum((o.get("tps") or 0) * w for o in r["ops"].values())
        if not main or not main.get("sched") or not n:
            continue
        syncs = sum(((main.get("calls") or {}).get(c) or {}).get("count", 0) for c in SYNC_CALLS)
        srv.append((main["sched"]["on_cpu_ns"] / 1e3 - syncs * sync_cpu) / n)
        measured = next((o for o in r["ops"].values() if o.get("role") == "measured"), None)
        if measured and measured.get("client_cpu_s") and measured.get("requests"):
            cli.append(measured["client_cpu_s"] * 1e6 / measured["requests"])
    if not srv or not cli:
        raise CalibrationError("no per-request CPU figures in the recording (no GET-only pass, no schedstat)")
    return max(1.0, float(np.median(srv))), max(1.0, float(np.median(cli)))


def _costs(cal: Calibration, runs: list[dict], passes: list[dict], sync_cpu: float, set_extra: float,
           set_src: str) -> tuple[ServerCosts, ClientCosts]:
    """Per-request CPU: the totals from the GET-only pass (the regime of a loaded server), else the
    windows' schedstat per request; split in halves between a request's read and its reply (no figure
    splits them: the write-only windows' request timestamps put 30-40% of the server's in the read, but
    with that split the model puts the baselines' requests on a path one fsync cycle shorter than they
    took: docs/explain.md §3)."""
    if passes:
        srv, cli = _per_request(passes, "server_cores"), _per_request(passes, "clients_cores")
        src = f"the GET-only pass before each read-heavy window ({len(passes)}): host CPU per request"
    else:
        srv, cli = _window_costs(runs, sync_cpu)
        src = "the windows' schedstat per request (no GET-only pass recorded)"
    cal.put("server_us_per_get", srv, "µs", f"{src} (the server's threads)")
    cal.put("client_us_per_request", cli, "µs", f"{src} (the benchmark clients)")
    cal.put("server_us_set_extra", set_extra, "µs", set_src)
    wake = _wake_us(runs)
    cal.put("wake_us", wake, "µs", "the main thread's run-queue time (schedstat) per sleep, two a loop iteration")
    read = srv * SPLIT
    server = ServerCosts(read_us={"GET": read, "SET": read + set_extra, "PING": read}, write_us=srv - read,
                         wake_us=wake, deliver_us=srv - read, sync_cpu_us=sync_cpu,
                         exec_us={"GET": read * 0.4, "SET": read * 0.4 + set_extra},
                         io_read_us=read * 0.6, io_write_us=srv - read)
    return server, ClientCosts(read_us=cli * SPLIT, write_us=cli * (1 - SPLIT), wake_us=wake)


def _wake_us(runs: list[dict]) -> float:
    vals = []
    for r in runs:
        s = r["server"]
        main = next((t for t in s.get("threads") or [] if t.get("tid") == s.get("main_tid")), None)
        cycles = (s.get("eventloop") or {}).get("cycles")
        if main and main.get("sched") and cycles:
            vals.append(main["sched"]["runqueue_ns"] / 1e3 / (2 * cycles))
    return float(np.median(vals)) if vals else 0.0


def _stalls(runs: list[dict]) -> tuple:
    vals = []
    for r in runs:
        s = r["server"]
        for e in (s.get("blocked_timeline") or {}).get("events") or []:
            if e[4] == "runnable" and e[2] == s.get("main_tid"):
                vals.append(e[1] / 1e3)
    return _thin(vals)


def _median_op(runs: list[dict], op: str) -> dict:
    vals = [r["ops"][op] for r in runs if op in r.get("ops", {})]
    out = {}
    for k in ("tps", "p50_us", "p95_us", "p99_us", "mean_us", "clients"):
        xs = [v[k] for v in vals if v.get(k) is not None]
        out[k] = float(np.median(xs)) if xs else None
    if out.get("clients") is not None:
        out["clients"] = int(out["clients"])
    return out


def _mode(doc: dict) -> str:
    off = ((doc.get("emulation") or {}).get("offload") or {}).get("mode")
    if off:
        return off
    server = doc.get("server") or {}
    if server.get("bio_aof_offload"):
        return "durable"
    if server.get("appendfsync") not in (None, "always"):
        raise CalibrationError(f"the model covers appendfsync always and its offload; this recording's server runs "
                               f"appendfsync {server.get('appendfsync')}")
    return "main"


def groups_for(workload: str, get_clients: int, set_clients: int, write_clients: int) -> tuple:
    if workload == "read-heavy":
        return (Group("GET", get_clients), Group("SET", set_clients, measured=False)) if set_clients else \
            (Group("GET", get_clients),)
    return (Group("SET", write_clients),)


def calibrate(doc: dict, workload: str, size: int, rate: float | None = None) -> Calibration:
    """The model of one cell of a recording, as recorded: its closed loop, or its open loop at `rate`
    (the costs, the calls and the stalls from those runs; the clients' the GET-only passes' if any)."""
    runs = _cell_runs(doc, workload, size, rate)
    if not runs:
        at = f" at {rate:,.0f}/s" if rate else ""
        raise CalibrationError(f"no measured {workload} {size} B run{at} with a server-side trace to calibrate from")
    mode = _mode(doc)
    sync, sync_src = call_lengths(runs, SYNC_CALLS)
    if not sync:
        raise CalibrationError(f"{workload} {size} B: no fdatasync/fsync was timed (a trace of the server's "
                               "threads is needed: --backend ebpf or shim)")
    aof, aof_src = call_lengths(runs, ("aof_write",))
    emu = (doc.get("emulation") or {}).get("fsync_delay") or {}
    injected = float(emu.get("median_ns") or 0.0)
    settings = doc.get("settings") or {}
    measured = {op: _median_op(runs, op) for op in ("GET", "SET") if any(op in r.get("ops", {}) for r in runs)}
    cal = Calibration(workload, size, params=_PLACEHOLDER, injected_ns=injected, measured=measured)
    sync_cpu = _sync_cpu(runs)
    cal.put("sync_us_p50", float(np.median(sync)), "µs", f"{sync_src}, on the thread that makes writes durable")
    cal.put("sync_cpu_us", sync_cpu or 0.0, "µs", "each sync call's length less its off-CPU time inside it (eBPF)"
            if sync_cpu is not None else "not measured (no off-CPU figures): taken as 0")
    cal.put("aof_write_us_p50", float(np.median(aof)) if aof else 0.0, "µs", aof_src)
    cal.put("injected_fsync_delay_us", injected / 1e3, "µs", "the recording's --inject-fsync-delay" if injected else
            "none injected")
    passes = _passes(doc, size)
    set_extra, set_src = _set_extra_us(doc, size)
    server, client = _costs(cal, runs, passes, sync_cpu or 0.0, set_extra, set_src)
    write_runs = _cell_runs(doc, "write-only", size) or runs
    bytes_per_set = _aof_bytes_per_set(write_runs)
    cal.put("aof_bytes_per_set", bytes_per_set, "bytes", "AOF bytes written per SET in the windows (eBPF)")
    g = measured.get("GET", {}).get("clients") or settings.get("get_clients") or 50
    bg = measured.get("SET", {}).get("clients") if workload == "read-heavy" else None
    w = measured.get("SET", {}).get("clients") if workload == "write-only" else None
    gather = float(((doc.get("emulation") or {}).get("offload") or {}).get("gather_ns") or 0) / 1e3
    groups = groups_for(workload, int(g), int(bg if bg is not None else settings.get("set_clients") or 8),
                        int(w or settings.get("write_clients") or 50))
    if rate:
        arrival = (runs[0].get("load") or {}).get("arrival") or "poisson"
        groups = tuple(replace(x, rate=rate, arrival=arrival) if x.measured else x for x in groups)
    cal.params = Params(groups=groups,
                        server=server, client=client,
                        durability=Durability(mode, Sampler(sync, 0.0, sync_cpu or 0.0), Sampler(aof), gather),
                        io_threads=int((doc.get("server") or {}).get("io_threads") or 1),
                        keyspace=int(settings.get("keyspace") or 100000), value_size=size,
                        aof_bytes_per_write=bytes_per_set,
                        duration_s=float(settings.get("duration_s") or 2.0))
    _interference(cal, runs, passes)
    _fit_jitter(cal, passes)
    return cal



def _aof_bytes_per_set(runs: list[dict]) -> float:
    vals = []
    for r in runs:
        s, w = r["server"], r["server"]["window_ns"] / 1e9
        sets = (r["ops"].get("SET") or {}).get("tps")
        nbytes = sum(((t.get("calls") or {}).get("aof_write") or {}).get("bytes") or 0 for t in s.get("threads") or [])
        if sets and nbytes:
            vals.append(nbytes / (sets * w))
    return float(np.median(vals)) if vals else 100.0


def _interference(cal: Calibration, runs: list[dict], passes: list[dict]) -> None:
    """What else takes the CPUs, from the kernel: on the server's, the main thread's runnable intervals
    (the timeline's, at least its threshold long) per second it wanted the CPU (on it or runnable,
    schedstat), and the rest of its run-queue time as stalls of the threshold's half; on the clients',
    the measured GET clients' share of time waiting for a CPU over the GET-only pass (schedstat), in
    stalls of the server's lengths (the clients' own lengths are not recorded)."""
    stalls, want_ns, rq_ns, long_ns, threshold = [], 0.0, 0.0, 0.0, 100.0
    for r in runs:
        s = r["server"]
        main = next((t for t in s.get("threads") or [] if t.get("tid") == s.get("main_tid")), None)
        if not main or not main.get("sched"):
            continue
        want_ns += main["sched"]["on_cpu_ns"] + main["sched"]["runqueue_ns"]
        rq_ns += main["sched"]["runqueue_ns"]
        tl = s.get("blocked_timeline") or {}
        threshold = (tl.get("threshold_ns") or 100_000) / 1e3
        for e in tl.get("events") or []:
            if e[4] == "runnable" and e[2] == s.get("main_tid"):
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


def _client_interference(cal: Calibration, passes: list[dict], stall: Sampler) -> None:
    """The clients' CPU stalls: their share of time waiting for a CPU over the GET-only pass (schedstat), in
    stalls as long as the main thread's (no timeline records the clients')."""
    waits = [((p["host_cpu"].get("clients_cpu_wait") or {}).get("measured")) for p in passes]
    waits = [w for w in waits if w is not None]
    mean_us = float(np.mean(stall.values_us)) if stall.values_us else 0.0
    rate = float(np.median(waits)) / (mean_us / 1e6) if waits and mean_us else 0.0
    cal.params = replace(cal.params, client_interference=Interference(rate, stall))
    cal.put("client_interference_per_s", rate, "1/s", "the GET clients' share of time waiting for a CPU in the "
            "GET-only pass (schedstat), in stalls as long as the main thread's" if waits else "not measured")


def _fit_jitter(cal: Calibration, passes: list[dict]) -> None:
    """The share of replies delayed on their way (an exponential delay whose mean puts the pass's p99
    where it was measured when 1% of them are), fitted so that the GET-only pass's p99 comes out as
    measured (the median of the passes'): the simulated passes' latencies, each delayed with that
    probability, by bisection. The one figure the model is fitted to: the tail the kernel's CPU
    accounting does not hold (its p50 and TPS are not fitted)."""
    if not passes:
        cal.put("jitter_share", 0.0, "", "not fitted (no GET-only pass)")
        return
    target = float(np.median([p["p99_us"] for p in passes]))
    clients = int(np.median([p["clients"] for p in passes]))
    seconds = float(np.median([p["seconds"] for p in passes]))  # a pass is a fixed count of requests
    base = replace(cal.params, groups=(Group("GET", clients),), duration_s=seconds, warmup_s=0.05)
    runs = [simulate(base, seed=7 + i).ops["GET"].latencies_us for i in range(FIT_RUNS)]
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
