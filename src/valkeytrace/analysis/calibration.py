"""The pipeline model (valkeytrace.pipeline) calibrated from one recording: every parameter taken from
the recording's own figures (analysis/calls.py reads them) or fitted to it (analysis/fitting.py), each
kept with its source (Calibration.inputs), so that a prediction says what it stands on.

Where each figure comes from (one cell: a workload and a value size):
- the fdatasync a write waits for: every call of the thread that makes writes durable (the main
  thread under appendfsync always, vt_offload under the virtual offload), as the kernel timed it, and
  its own CPU; the AOF write()s alike; the injected delay (record --inject-fsync-delay) is subtracted
  from each call and the new one added;
- the server's and the clients' CPU per request: each GET-only pass recorded before a read-heavy
  window (the host's CPU accounting over it, per request); a SET's extra from the server's own
  commandstats; without a pass, each window's schedstat per request;
- a thread's wake-up: the main thread's run-queue time (schedstat) per sleep (two a loop iteration);
- what else takes a CPU: stalls as long as the main thread's runnable intervals in the kernel's
  timeline, at their recorded rate;
- fitted: where a request's CPU falls between its read and its reply (the cell as recorded reproduces
  its measured p50), and per pass the share of replies delayed on their way (that pass's p99).

The host moves between runs (on this project's VM the CPU per request of a GET-only pass moved by
25% within a recording), so a simulated run draws one pass's costs and one window's calls and stalls
(Calibration.variant): the prediction's spread is the recording's own.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from valkeytrace.analysis import calls
from valkeytrace.analysis.calls import (AOF, SYNC_CALLS, CalibrationError, PassCost, Stalls, call_lengths, cell_runs,
                                        durable_by, rates_of)
from valkeytrace.analysis.fitting import SPLIT_SEEDS, cost_params, fit_jitters, fit_split
from valkeytrace.pipeline.params import ClientCosts, Durability, Group, Jitter, Params, Sampler, ServerCosts
from valkeytrace.recording.model import Document, Run, decode

__all__ = ["Calibration", "CalibrationError", "Input", "Measured", "calibrate", "groups_for", "rates_of"]

METRICS = ("tps", "p50_us", "p95_us", "p99_us", "mean_us")
MIN_WINDOW_CALLS = 50       # a window with fewer sync calls draws from the cell's pooled calls
KEY_BYTES = 16              # the benchmark clients' keys: "key:" and 12 digits (key:__rand_int__)


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


@dataclass(frozen=True)
class Draw:
    """What one simulated run takes from one GET-only pass: its CPU per request and its fitted jitter."""
    server: ServerCosts
    client: ClientCosts
    jitter: Jitter | None


@dataclass(frozen=True)
class Window:
    """What one simulated run takes from one recorded window: its sync calls and its stalls."""
    sync: Sampler
    stalls: Stalls | None


@dataclass
class Calibration:
    workload: str
    value_size: int
    params: Params                                  # the median pass's costs, every window's calls pooled
    inputs: dict = field(default_factory=dict)      # name -> Input
    injected_ns: float = 0.0                        # the recording's own injected fsync delay (median)
    measured: dict = field(default_factory=dict)    # op -> Measured (the medians of the runs)
    per_run: dict = field(default_factory=dict)     # op -> metric -> [each run's figure]
    fitted: list = field(default_factory=list)      # the inputs fitted to the recording, not measured
    draws: list = field(default_factory=list)       # [Draw]: one per GET-only pass (or window)
    windows: list = field(default_factory=list)     # [Window]: one per recorded window
    repeats: int = 1                                # the cell's runs: a measured figure is their median
    cpu_per_request: list = field(default_factory=list)  # each draw's server + client µs a request
    host: dict = field(default_factory=dict)        # "tps", "p50_us" -> [each fixed load's figures over its
    #                                                 repeats] (the host's movement, intervals.shift_sd)
    exec_us: float | None = None                    # a GET's execution (INFO commandstats): what the main thread
    #                                                 keeps when predict adds an I/O thread

    def put(self, name: str, value, unit: str, source: str) -> None:
        self.inputs[name] = Input(round(value, 3) if isinstance(value, float) else value, unit, source)

    def value(self, name: str) -> float:
        return float(self.inputs[name].value)

    def variant(self, rng: np.random.Generator) -> Params:
        """The parameters of one simulated run: a pass's costs and a window's calls and stalls, drawn."""
        p = self.params
        if self.draws:
            d = self.draws[int(rng.integers(len(self.draws)))]
            p = replace(p, server=d.server, client=d.client, jitter=d.jitter)
        if self.windows:
            w = self.windows[int(rng.integers(len(self.windows)))]
            p = replace(p, durability=replace(p.durability, sync=w.sync))
            if w.stalls:
                p = replace(p, interference=w.stalls.server, client_interference=w.stalls.clients)
        return p


def _median_op(runs: list[Run], op: str) -> tuple[Measured, dict]:
    vals = [r.ops[op] for r in runs if op in r.ops]
    out, per = Measured(), {}
    for k in (*METRICS, "clients"):
        xs = [getattr(v, k) for v in vals if getattr(v, k) is not None]
        setattr(out, k, float(np.median(xs)) if xs else None)
        if k != "clients":
            per[k] = [float(x) for x in xs]
    if out.clients is not None:
        out.clients = int(out.clients)
    return out, per


def groups_for(workload: str, get_clients: int, set_clients: int, write_clients: int) -> tuple:
    if workload == "read-heavy":
        return (Group("GET", get_clients), Group("SET", set_clients, measured=False)) if set_clients else \
            (Group("GET", get_clients),)
    return (Group("SET", write_clients),)


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


def calibrate(doc, workload: str, size: int, rate: float | None = None) -> Calibration:
    """The model of one cell of a recording, as recorded: its closed loop, or its open loop at `rate`
    (the costs, the calls and the stalls from those runs; the clients' the GET-only passes' if any)."""
    doc = decode(doc)
    runs = cell_runs(doc, workload, size, rate)
    if not runs:
        at = f" at {rate:,.0f}/s" if rate else ""
        raise CalibrationError(f"no measured {workload} {size} B run{at} with a server-side trace to calibrate from")
    who = durable_by(doc)
    if not who.emulated and not doc.server.bio_aof_offload and doc.server.appendfsync not in (None, "always"):
        raise CalibrationError(f"the model covers appendfsync always and its offload; this recording's server runs "
                               f"appendfsync {doc.server.appendfsync}")
    sync, sync_src = call_lengths(runs, SYNC_CALLS)
    if not sync:
        raise CalibrationError(f"{workload} {size} B: no fdatasync/fsync was timed (a trace of the server's "
                               "threads is needed: --backend ebpf or shim)")
    aof, aof_src = call_lengths(runs, (AOF,))
    injected = float(doc.emulation.fsync_delay.median_ns or 0.0)
    stall_us, period_us = (float(doc.emulation.fsync_delay.stall_ns or 0) / 1e3,
                           float(doc.emulation.fsync_delay.stall_period_ns or 0) / 1e3)
    if stall_us:  # the recorded stalls are the emulation's, put back on the model's own schedule
        sync = tuple(v - stall_us if v > stall_us else v for v in sync)
    meas = {op: _median_op(runs, op) for op in ("GET", "SET") if any(op in r.ops for r in runs)}
    cal = Calibration(workload, size, params=Params((), ServerCosts({}, 0.0), ClientCosts(0.0, 0.0),
                                                    Durability("main", Sampler(()), Sampler(()))),
                      injected_ns=injected, measured={k: v[0] for k, v in meas.items()},
                      per_run={k: v[1] for k, v in meas.items()}, repeats=len(runs), host=calls.repeated(doc))
    cal.exec_us = calls.exec_us(doc, size)
    own_cpu = calls.sync_cpu(runs)
    sync_cpu = own_cpu or 0.0
    cal.put("sync_us_p50", float(np.median(sync)), "µs", f"{sync_src}, on the thread that makes writes durable")
    cal.put("sync_cpu_us", sync_cpu, "µs", "each sync call's length less its off-CPU time inside it (eBPF)"
            if own_cpu is not None else "not measured (no off-CPU figures): taken as 0")
    cal.put("aof_write_us_p50", float(np.median(aof)) if aof else 0.0, "µs", aof_src)
    cal.put("injected_fsync_delay_us", injected / 1e3, "µs", "the recording's --inject-fsync-delay" if injected else
            "none injected")
    costs = _pass_costs(cal, doc, runs, size, sync_cpu)
    shape = _cost_shape(cal, doc, runs, size, sync_cpu)
    nbytes = _aof_bytes(cal, doc, runs, size)
    cal.params = Params(groups=_groups(doc, workload, cal.measured, runs, rate), server=ServerCosts({}, 0.0),
                        client=ClientCosts(0.0, 0.0),
                        durability=Durability(who.mode, Sampler(sync, 0.0, sync_cpu), Sampler(aof),
                                              float((doc.emulation.offload.gather_ns if doc.emulation.offload else 0)
                                                    or 0) / 1e3, who.job_interval_us if who.mode != "main" else 0.0,
                                              stall_us, period_us,
                                              (doc.emulation.offload.design if doc.emulation.offload else None)
                                              or "bio-write"),
                        io_threads=int(doc.server.io_threads or 1), keyspace=int(doc.settings.keyspace or 100000),
                        value_size=size, aof_bytes_per_write=nbytes, duration_s=float(doc.settings.duration_s or 2.0))
    passes = calls.passes_of(doc, size)
    _stalls(cal, runs, passes)
    split = _fit_split(cal, costs, shape)
    _draws(cal, costs, split, *shape)
    _windows(cal, runs, passes, sync_cpu)
    return cal


def _cost_shape(cal: Calibration, doc: Document, runs: list[Run], size: int, sync_cpu: float) -> tuple:
    """(a SET's extra, the wake-up, a sync's CPU, the main thread's share under I/O threads): what turns a
    pass's totals into the model's per-request costs (fitting.cost_params), each put with its source."""
    extra, extra_src = calls.set_extra_us(doc, size)
    wake = calls.wake_us(runs)
    share = calls.main_share(runs, sync_cpu) if (doc.server.io_threads or 1) > 1 else None
    cal.put("server_us_set_extra", extra, "µs", extra_src)
    cal.put("wake_us", wake, "µs", "the main thread's run-queue time (schedstat) per sleep, two a loop iteration")
    if share is not None:
        cal.put("main_thread_share", share, "", "under I/O threads: the main thread's share of the server threads' "
                "CPU over the windows (schedstat, sync calls left out): what it executes of a request")
    return extra, wake, sync_cpu, share


def _aof_bytes(cal: Calibration, doc: Document, runs: list[Run], size: int) -> float:
    nbytes = calls.aof_bytes_per_set(cell_runs(doc, "write-only", size) or runs)
    if nbytes is None:
        cal.put("aof_bytes_per_set", float(_resp_set_bytes(size)), "bytes", "not measured: the RESP form of a SET "
                f"of this value size with the benchmark's {KEY_BYTES}-byte key")
        return float(_resp_set_bytes(size))
    cal.put("aof_bytes_per_set", nbytes, "bytes", "AOF bytes written per SET in the windows (eBPF)")
    return nbytes


def _fit_split(cal: Calibration, costs: list[PassCost], shape: tuple) -> float:
    """The CPU split fitted to the cell's measured op (fitting.fit_split), put as fitted; cal.params takes it."""
    op = "GET" if cal.workload == "read-heavy" else "SET"
    median = PassCost(float(np.median([c.server_us for c in costs])), float(np.median([c.client_us for c in costs])))

    def params_at(split: float) -> Params:
        server, client = cost_params(median, split, *shape)
        return replace(cal.params, server=server, client=client)
    m = cal.measured.get(op) or Measured()
    runs_p50 = [np.log(x) for x in cal.per_run.get(op, {}).get("p50_us", []) if x]
    noise = max(0.01, float(np.std(runs_p50, ddof=1)) if len(runs_p50) > 1 else 0.0)
    split, tried = fit_split(params_at, op, m.p50_us, m.tps, noise)
    cal.params = params_at(split)
    cal.fitted.append("cpu_split")
    cal.put("cpu_split", split, "", "fitted: the share of a request's CPU in its read (the rest in its reply) under "
            f"which the cell as recorded comes nearest its measured {op} p50 and TPS ({m.p50_us or 0:.0f} µs, "
            f"{m.tps or 0:,.0f}/s; within the windows' own spread ({noise:.1%}) the split nearest a half; simulated "
            f"{len(SPLIT_SEEDS)} times each, the medians "
            + ", ".join(f"{s:g}: {v[0]:.0f} µs {v[1]:,.0f}/s" for s, v in tried.items()) + ")")
    return split


def _resp_set_bytes(size: int) -> int:
    """A SET as the AOF stores it: *3, $3 SET, the key, the value, each framed."""
    return 4 + 9 + len(f"${KEY_BYTES}\r\n") + KEY_BYTES + 2 + len(f"${size}\r\n") + size + 2


def _pass_costs(cal: Calibration, doc: Document, runs: list[Run], size: int, sync_cpu: float) -> list[PassCost]:
    """The CPU per request each simulated run may draw: the GET-only passes (of every size up to
    calls.POOL_MAX_BYTES: one per window in a compare), else each window's schedstat per request."""
    costs = calls.pooled_passes(doc, size)
    if costs:
        sizes = sorted({c.size for c in costs})
        src = f"{len(costs)} GET-only passes ({', '.join(str(s) for s in sizes)} B): host CPU per request"
    else:
        costs = calls.window_costs(runs, sync_cpu)
        src = f"{len(costs)} windows' schedstat per request (no GET-only pass recorded)"
    srv, cli = [c.server_us for c in costs], [c.client_us for c in costs]
    cal.cpu_per_request = [c.total_us for c in costs]
    cal.put("server_us_per_get", float(np.median(srv)), "µs", f"the median of {src} (the server's threads); "
            f"each simulated run draws one: {min(srv):.1f}-{max(srv):.1f}")
    cal.put("client_us_per_request", float(np.median(cli)), "µs", f"the same (the benchmark clients): "
            f"{min(cli):.1f}-{max(cli):.1f}")
    return costs


def _draws(cal: Calibration, costs: list[PassCost], split: float, extra: float, wake: float, sync_cpu: float,
           share: float | None) -> None:
    """One Draw per pass: its costs, and its jitter fitted to its own p99."""
    said, shares = [], []
    sides = [cost_params(c, split, extra, wake, sync_cpu, share) for c in costs]
    fits = fit_jitters([(replace(cal.params, server=srv, client=cli), c) for (srv, cli), c in zip(sides, costs)])
    for (server, client), (jitter, how) in zip(sides, fits):
        cal.draws.append(Draw(server, client, jitter))
        shares.append(jitter.share if jitter else 0.0)
        said.append(how)
    if any(shares):
        cal.fitted.append("jitter_share")
    cal.put("jitter_share", float(np.median(shares)), "", "fitted per GET-only pass, to its own p99 (the median "
            "share here): " + "; ".join(said))


def _windows(cal: Calibration, runs: list[Run], passes: list, sync_cpu: float) -> None:
    """One Window per recorded window: its own sync calls (the cell's pooled when it has few) and stalls."""
    pooled, stall = cal.params.durability.sync, cal.params.durability.stall_us
    for r in runs:
        own, _ = call_lengths([r], SYNC_CALLS)
        own = tuple(v - stall if stall and v > stall else v for v in own)
        sync = Sampler(own, 0.0, sync_cpu) if len(own) >= MIN_WINDOW_CALLS else pooled
        cal.windows.append(Window(sync, calls.stalls_of([r], passes)))


def _stalls(cal: Calibration, runs: list[Run], passes: list) -> None:
    s = calls.stalls_of(runs, passes)
    if s is None:
        cal.put("interference_per_s", 0.0, "1/s", "not measured (no schedstat of the main thread)")
        return
    cal.params = replace(cal.params, interference=s.server, client_interference=s.clients)
    cal.put("interference_per_s", s.server.rate_per_s, "1/s", f"the main thread's runnable intervals "
            f"({s.long_stalls} of {s.threshold_us:.0f} µs or more, the rest of its run-queue time as "
            f"{s.threshold_us / 2:.0f} µs ones) per second it wanted a CPU (schedstat)")
    vals = s.server.stall.values_us
    cal.put("interference_stall_us_mean", float(np.mean(vals)) if vals else 0.0, "µs", "their mean length")
    cal.put("client_interference_per_s", s.clients.rate_per_s, "1/s", "the GET clients' share of time waiting for "
            "a CPU in the GET-only passes (schedstat), in stalls as long as the main thread's")

