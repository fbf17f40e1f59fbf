"""One `record` session: target + workload + tracer -> recording.

Runs the matrix (repeat x value size x workload, repeats outermost so that slow drift spreads
over every cell), each cell by its scenario (workload/scenarios.py) inside a window this module
opens for the tracer, the server's own view and the CPU accounting; writes the recording after
every run (a crash or Ctrl-C keeps what was measured), and marks failed runs without stopping
the session unless the server is gone. The document itself is built by recording/document.py.
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any

from valkeytrace import stopping, system
from valkeytrace.errors import VTError
from valkeytrace.recording import document
from valkeytrace.recording import format as recfmt
from valkeytrace.recording.model import ServerExit
from valkeytrace.server.process import Exit
from valkeytrace.server.view import LoopCount, ServerView
from valkeytrace.tracers import offload as voff
from valkeytrace.workload import scenarios
from valkeytrace.workload.benchmark import WindowAccept, window_accept


# runs per --fsync-sensitivity level, whatever --repeat: under `always` a run's GET p50 sits on
# one of two paths (one or two fsync cycles; analysis/model.py), and one run per level put a
# level on the longer path in about 1 sweep of 10 on the 2-CPU VM (R² 0.77-0.85 where the other
# levels lay on a line); the median of 3 takes the level's usual path
SENSITIVITY_MIN_RUNS = 3
# windows whose socket reads and writes are timed and sized (the eBPF backend): a write-only cell (its
# durability record, the replication link), and an observed one (--attach) only of a server in a
# replication (its link, for valkeytrace merge): the raw socket tracepoints fire for every socket I/O
# on the host, and an attached recording of a lone server has no use for them (benchmarks/peers.py)
REQUEST_WINDOWS = ("write-only",)
LAUNCHES = itertools.count(1)  # each Recorder a launch of its own (Recorder.memo's demand passes)


def replicating(server: dict) -> bool:
    """Whether a described server is in a replication (a replica, or a primary with replicas)."""
    repl = server.get("replication") or {}
    try:
        return repl.get("role") == "slave" or int(repl.get("connected_slaves") or 0) > 0
    except (TypeError, ValueError):
        return False


@dataclass
class Settings:
    workloads: tuple
    sizes: tuple
    repeat: int
    duration_s: float
    keyspace: int
    get_clients: int
    set_clients: int
    write_clients: int
    backend: str
    sensitivity: tuple = ()  # added fsync delays (ns) each cell is also run at (--fsync-sensitivity)
    # runs per added delay in this recording; `compare` asks for fewer a launch, the launches together making
    # up SENSITIVITY_MIN_RUNS (the slope is fitted on each level's median over the merged recording)
    sensitivity_runs: int = SENSITIVITY_MIN_RUNS
    rates: tuple = ()        # open loop (--rate, --rates): the measured op's requests due per second, a cell each
    arrival: str = "poisson"  # --arrival: how those requests are spaced
    set_rate: float | None = None  # --set-rate: read-heavy's background SETs open-loop too (else closed loop)
    pool: str = "clients"    # --connections: the open loop's connections (clients: fixed, one in flight; grow)
    demand_pass: bool = True  # --no-demand-pass: no GET-only passes for the model (it calibrates on the windows)
    replica_get_clients: int = 0  # --replica-get-clients: readers on the first replica during write-only
    # how far a closed-loop window may miss duration_s and be kept ($VALKEYTRACE_WINDOW_ACCEPT)
    window_accept: WindowAccept = field(default_factory=window_accept)

    def as_recorded(self) -> dict:
        """The recording's `settings`."""
        return {"workloads": list(self.workloads), "sizes": list(self.sizes), "repeat": self.repeat,
                "duration_s": self.duration_s, "keyspace": self.keyspace, "get_clients": self.get_clients,
                "set_clients": self.set_clients, "write_clients": self.write_clients, "backend": self.backend,
                "fsync_sensitivity_ns": list(self.sensitivity), "fsync_sensitivity_runs": self.sensitivity_runs,
                "window_accept": list(self.window_accept),
                **({} if self.demand_pass else {"demand_pass": False}),
                **({"rates": list(self.rates), "arrival": self.arrival, "set_rate": self.set_rate,
                                    "connections": self.pool} if self.rates else {})}

    def matrix(self):
        """[(repeat, workload, value_size, added fsync delay ns, rate)] in execution order: each cell
        (at each --rates rate, else closed loop: None), then the same cell at each --fsync-sensitivity
        level; below sensitivity_runs repeats, the levels (not the cells) are swept again after the
        matrix until each has that many runs, so that the slope is fitted on medians
        (analysis/sensitivity.py)."""
        out = []
        loaded = [w for w in self.workloads if scenarios.SCENARIOS[w].drives_load]
        rates = self.rates or (None,)
        for r in range(1, self.repeat + 1):
            for size in self.sizes:
                for w in self.workloads:
                    if w not in loaded and size != self.sizes[0]:
                        continue  # observing only: value sizes mean nothing, one window a repeat
                    for rate in (rates if w in loaded else (None,)):
                        out.append((r, w, size, 0, rate))
                        if w in loaded:
                            out += [(r, w, size, level, rate) for level in self.sensitivity]
        if self.sensitivity:
            for r in range(self.repeat + 1, self.sensitivity_runs + 1):
                for size in self.sizes:
                    for w in loaded:
                        for rate in rates:
                            out += [(r, w, size, level, rate) for level in self.sensitivity]
        return out


def describe_exit(gone: Exit | ServerExit) -> str:
    """'was killed by SIGKILL', 'shut down on SIGTERM (status 0)', 'exited with status 1: why', 'ended'
    (an attached server: how is unknown)."""
    from valkeytrace.reporters.sentences import Ended, how_ended_why

    return how_ended_why(Ended(signal=gone.signal, status=gone.status, cause=gone.cause))


def tracer_cost(cost, server_view: dict | None, begin: LoopCount | None, end: LoopCount | None) -> dict:
    """runs[].tracer.cost: the programs' cost (tracers/bpf_cost.py, a model.TracerCost) over the requests the
    server counted in the window (INFO stats total_commands_processed at its edges; else commandstats' GET +
    SET, reset as it began)."""
    stats = (server_view or {}).get("commandstats") or {}
    cost.requests = (end.commands - begin.commands if begin is not None and end is not None else
                     sum(int(v.get("calls") or 0) for v in stats.values()) if stats else None)
    run_ns = sum(p.run_ns for p in cost.programs)
    cost.bpf_ns_per_request = round(run_ns / cost.requests, 1) if cost.requests and cost.counted else None
    return document.plain(cost)


def exit_record(gone: Exit, window_start: float | None, started_at: float | None) -> dict:
    """runs[].server_exit: when (at_s: seconds into the run's window, or into the run before it opened)
    and how (signal or status) the server ended."""
    inside = bool(window_start) and gone.time >= (window_start or 0)
    start = window_start if inside else started_at
    out = {"at_s": round(max(0.0, gone.time - start), 3) if start else None, "in_window": inside,
           **{k: v for k, v in (("signal", gone.signal), ("status", gone.status), ("cause", gone.cause)) if v is not None}}
    if gone.signal is None and gone.status is None:
        out["status"] = None
    return out


@dataclass
class SideMemo:
    """What a side of a compare keeps across its launches in one process (session.memo)."""
    rates: dict = field(default_factory=dict)   # the rate each cell ran at: its runs need no calibration pass
    demand: dict = field(default_factory=dict)  # (workload, size) -> the launch that measured its demand pass


class Recorder:
    def __init__(self, target, client, settings: Settings, tracer, out_path: str, doc: dict,
                 owner: tuple[int, int] | None = None, memo: SideMemo | None = None):
        self.target = target
        # what a side keeps across its launches in one process (session.memo): the rate each cell ran at
        # (its runs need no calibration pass), and which launch measured each cell's demand pass
        self.memo = memo if memo is not None else SideMemo()
        self.launch = next(LAUNCHES)
        # this launch's keyspace (scenarios.Load.keyspace_state); an attached server's other clients may
        # write its keys between our runs: filled each time
        self.keyspace_state: dict | None = None if getattr(target, "mode", "") == "attach" else {}
        self.client = client
        self.settings = settings
        self.tracer = tracer
        self.out_path = out_path
        # checkpoints go beside the output, so a previous file at out_path stays untouched
        # until the recording is finished (or interrupted); the partial file loads like any other
        self.partial_path = out_path + ".partial"
        self.owner = owner  # under sudo: the invoking user owns what we write
        self.doc = doc
        self.doc.setdefault("runs", [])
        self._encoder = recfmt.GrowingDocument()
        self.offload: Any = None   # tracers.offload.OffloadStats under record --emulate-offload
        self.replicas: Any = None  # server.replicas.ReplicaSet under record --replicas
        self.prober: Any = None    # workload.durability_probe.Prober under record --replicas
        self.cluster: Any = None   # server.cluster.Cluster under record --cluster (its other nodes' tracers)
        self.shards: tuple = ()    # and its routes (workload.cluster_load.Shard)
        self.failover: Any = None  # record --failover: workload.failover.Failover
        self.acked: Any = None     # workload.durability_check.AckedWrites under record --verify-durability
        self.stalls: Any = None    # tracers.stalls.StallLog under --inject-fsync-delay ...,stall:S/P
        self._cpu: list[system.CpuSnapshot] = []  # the window's CPU snapshots, at its edges
        self._load: list[Any] = [None, None]  # the offload's counters before the load's client started, the window's figures

    def _write(self, path, data: bytes, durable: bool):
        recfmt.write(path, self.doc, data, durable=durable)
        system.release_free_memory()  # the encoded copy of the whole document is garbage now
        if self.owner:
            os.chown(path, *self.owner)

    def checkpoint(self):
        """The recording so far, beside the output: a fast, larger encoding, not fsynced
        (recording.format.write)."""
        # the runs before the first running one are final: run_one() checkpoints when a run ends
        runs = document.outcomes(self.doc)
        final = next((i for i, r in enumerate(runs) if r.status == "running"), len(runs))
        self._write(self.partial_path, self._encoder.encode(self.doc, final), durable=False)

    def finish(self):
        """Write the final recording to out_path (encoded once, compressed harder than the
        checkpoints, fsynced: the server is no longer measured) and drop the checkpoint."""
        self._write(self.out_path, recfmt.encode(self.doc), durable=True)
        try:
            os.unlink(self.partial_path)
        except FileNotFoundError:
            pass

    # -- one run ---------------------------------------------------------------------------------
    def _window(self, run: dict, traced: bool = True, client_pids=()):
        """Callbacks marking the measured window for the tracer, the server's own view and the
        host's CPU accounting (self._cpu: snapshots; _host_cpu() turns them into cores)."""
        view = ServerView(self.target)
        loop: list[Any] = [None, None, None, None]  # INFO stats at begin and end (LoopCount), memory sampler, offload
        self._load = [self.offload.snapshot() if self.offload is not None else None, None]  # before the client starts
        times: list[float] = [0.0]  # the window's start
        started, workload = run.get("started_at"), run.get("workload")

        # the server's own event-loop count is read inside the tracer's window (after its begin,
        # before its end: a tracer's begin and end take tens of ms, thousands of iterations)
        def begin():
            view.begin()
            run["window_start"] = times[0] = time.time()
            self._cpu = [system.cpu_snapshot(self.target.pid, client_pids)]  # a window measured again starts anew
            loop[3] = self.offload.snapshot() if self.offload is not None else None
            if traced:  # a write-only cell: its requests timed too, for its durability record
                requests = workload in REQUEST_WINDOWS or (workload == "none" and replicating(self.doc.get("server") or {}))
                observe = workload == "none"  # a server's own load only: cheap to leave attached
                self.tracer.window_begin(requests=requests, observe=observe)
                self._others_begin(requests, observe)
            if self.prober is not None:
                self.prober.begin()
            loop[0] = view.eventloop()
            loop[2] = self._memory_sampler()

        def end():
            gone = self.target.gone()  # the server ended inside the window: it closes where it did
            loop[1] = None if gone else view.eventloop()
            if self.prober is not None:
                run["replication"] = self.prober.end()
            run["window_end"] = max(gone.time, times[0]) if gone else time.time()
            self._cpu.append(system.cpu_snapshot(self.target.pid, client_pids))
            figures = voff.window(loop[3], self.offload.snapshot()) if self.offload is not None else None
            if figures is not None:
                run["offload"] = self._load[1] = figures
            metrics = self.tracer.window_end(gone.mono_ns if gone else None) if traced else None
            a, b = loop[0], loop[1]
            if metrics is not None:
                if "eventloop" not in metrics and a and b:  # the server's own count, whatever the tracer
                    metrics["eventloop"] = {"source": "INFO stats eventloop_cycles", "cycles": b.cycles - a.cycles,
                                            "duration_us": b.duration_us - a.duration_us}
                if gone:
                    metrics["server_exit"] = exit_record(gone, times[0], started)
                run["server"] = metrics
                self._others_end(run)
            seen = None
            if gone:
                run["server_exit"] = exit_record(gone, times[0], started)
            else:
                run["server_view"] = seen = view.end()
            cost = metrics.pop("tracer_cost", None) if metrics is not None else None
            if cost is not None:
                run["tracer"] = {"cost": tracer_cost(cost, seen, a, b)}
            if loop[2] is not None:  # last: its INFO thread may wait on a stalled server; the window has ended
                run["memory"] = loop[2].stop()
        return begin, end

    def _others_begin(self, requests: bool, observe: bool) -> None:
        """The other servers' tracers' windows begin: the replicas', a cluster's other nodes'."""
        for extra in (self.replicas, self.cluster):
            if extra is not None:
                extra.window_begin(requests=requests, observe=observe)

    def _others_end(self, run: dict) -> None:
        if self.replicas is not None:
            run["replicas"] = self.replicas.window_end()
        if self.cluster is not None:  # in the order of the recording's cluster.nodes, shard 0's primary left out
            run["node_windows"] = self.cluster.window_end()
            run["config_fsync"] = self.cluster.config_window()

    def _memory_sampler(self):
        """The window's memory sampler (tracers/memory.py), started; None without a server process to read."""
        from valkeytrace.tracers import memory

        if not self.target.pid or not self.target.port:
            return None
        hz = memory.ATTACHED_HZ if getattr(self.target, "mode", "") == "attach" else (memory.SAMPLE_HZ, memory.INFO_HZ)
        sampler = memory.MemorySampler(self.target.pid, memory.connector(self.target.host, self.target.port),
                                       self.offload, self.stalls, *hz)
        sampler.start()
        return sampler

    def _host_cpu(self, run: dict, client: system.MeasuredClient):
        snaps, self._cpu = self._cpu, []
        if len(snaps) == 2:
            run["host_cpu"] = document.plain(system.cpu_window(snaps[0], snaps[1], client))

    def _scenario(self, workload: str, rate: float | None = None):
        s = self.settings
        load = None
        if self.client is not None:
            load = scenarios.Load.for_server(self.target, self.client, rates=self.memo.rates,
                                             keyspace_state=self.keyspace_state,
                                             keyspace=s.keyspace, get_clients=s.get_clients,
                                             set_clients=s.set_clients, write_clients=s.write_clients, rate=rate,
                                             arrival=s.arrival, set_rate=s.set_rate, pool=s.pool, acked=self.acked,
                                             stall_log=self.stalls.path if self.stalls is not None else None,
                                             replica_port=self.replicas.targets[0].port if self.replicas else None,
                                             replica_readers=s.replica_get_clients, window_accept=s.window_accept,
                                             shards=self.shards,
                                             failover=self.failover)
        sc = scenarios.scenario(workload, load)
        if isinstance(sc, scenarios.Observe):
            sc.wait = self.target.wait_exit
        return sc

    def _demand_here(self, workload: str, size: int) -> bool:
        """Whether this launch measures the cell's demand pass (the model's GET-only calibration): the
        first launch of a side that reaches the cell does, in each of its repeats; later ones keep it."""
        return self.settings.demand_pass and \
            self.memo.demand.setdefault((workload, size), self.launch) == self.launch

    def _measure(self, run: dict, workload: str, size: int, traced: bool = True, duration_s: float | None = None,
                 rate: float | None = None, extra_delay_ns: int = 0):
        """One cell by its scenario, inside this recorder's window (rate: open loop; extra_delay_ns: the
        fsync sensitivity's added delay, no demand pass then)."""
        client = self._scenario(workload, rate).run(
            run, size, duration_s or self.settings.duration_s,
            window=lambda client_pids: self._window(run, traced, client_pids),
            with_demand=traced and not extra_delay_ns and self._demand_here(workload, size))
        self._host_cpu(run, client)
        self._load_counts()

    def _load_counts(self):
        """The writes the server rejected over the whole load, from before its client started to its end (warm-up,
        window, drain: what the client's ops.SET.rejected counts, every error reply it read), beside the window's
        rejected_writes (its edges are the client's markers as the recorder reads them: the client's warm-up and
        drain, and requests read late, fall outside)."""
        (start, figures), self._load = self._load, [None, None]
        end = self.offload.snapshot() if self.offload is not None and start is not None else None
        if end is not None and figures is not None:
            figures["load_rejected_writes"] = int(end.rejected_writes - start.rejected_writes)

    def run_one(self, repeat: int, workload: str, size: int, extra_delay_ns: int = 0, rate: float | None = None) -> dict:
        run = document.new_run(self.doc, workload, size, repeat,
                               extra_delay_ns if self.settings.sensitivity else None)
        if self.acked is not None:  # its clients' acknowledged writes are this run's (runs[].durability_check.runs)
            self.acked.begin_run()
        if rate:
            s = self.settings
            run["load"] = {"mode": "open", "rate": rate, "arrival": s.arrival, "pool": "fixed" if s.pool == "clients" else "grow",
                           **({"connections": s.get_clients if workload == "read-heavy" else s.write_clients}
                              if s.pool == "clients" else {})}
        try:
            if self.settings.sensitivity:
                self.tracer.set_extra_fsync_delay(extra_delay_ns)
            self._measure(run, workload, size, rate=rate or None,
                          extra_delay_ns=extra_delay_ns if self.settings.sensitivity else 0)
            run["status"] = "ok"
        except KeyboardInterrupt:
            run["status"] = "interrupted"
            run["error"] = "interrupted before the run finished"
            raise
        except (VTError, OSError, ConnectionError) as exc:
            run["status"] = "failed"
            run["error"] = self._failure_reason(exc)
        except Exception as exc:  # e.g. the server vanished under the client library
            run["status"] = "failed"
            run["error"] = self._failure_reason(exc)
        finally:
            gone = self.target.gone()
            if gone and "server_exit" not in run:
                o = document.outcome(run)
                run["server_exit"] = exit_record(gone, o.window_start, o.started_at)
            if extra_delay_ns and not gone:
                try:
                    self.tracer.set_extra_fsync_delay(0)
                except Exception:
                    pass
            self._cpu = []  # snapshots of a window that did not end
            run["ended_at"] = time.time()
            self.checkpoint()
        return run

    def _failure_reason(self, exc: Exception) -> str:
        gone = self.target.gone()
        if not gone:
            # the process table already says it is gone: its watcher says how a moment later; or it still runs,
            # but a killed server's sockets close before its exit is told (the client failed first once in CI)
            self.target.wait_exit(2.0 if not self.target.alive() else 0.5)
            gone = self.target.gone()
        if gone or not self.target.alive():
            how = describe_exit(gone) if gone else "ended"
            return f"the server (pid {self.target.pid}) {how} during the run: {exc}"
        return str(exc) or type(exc).__name__

    OVERHEAD_PASS_S = 3.0

    # what the untraced pass is, by backend: (when it runs first, when it runs second)
    UNTRACED = {"none": ("no tracer",) * 2, "shim": ("the shim preloaded, paused (not recording)",) * 2,
                "ebpf": ("nothing loaded (the probes not yet compiled)", "the probes detached, the programs still loaded"),
                "both": ("the shim paused, no eBPF program loaded", "the shim paused, the eBPF probes detached")}

    def measure_overhead(self, traced_first: bool | None = None) -> dict:
        """One untraced and one traced pass of a short read-heavy cell (first size), side by side,
        in random order (traced_first). Untraced: the shim paused; eBPF nothing loaded when
        untraced comes first, the probes detached (programs loaded) when it comes second."""
        import random

        size = self.settings.sizes[0]
        seconds = min(self.settings.duration_s, self.OVERHEAD_PASS_S)
        if traced_first is None:
            traced_first = random.random() < 0.5
        order = (True, False) if traced_first else (False, True)
        from valkeytrace.recording.model import Op, decode_as

        untraced = self.UNTRACED[self.tracer.name][traced_first]
        passes: dict[bool, tuple[Op, Op]] = {}
        self.tracer.start_paused(self.target)
        for traced in order:
            if traced:
                self.tracer.resume(self.target)
            elif traced_first:
                self.tracer.pause(self.target)
            ops: dict = {}
            self._measure({"ops": ops}, "read-heavy", size, traced=traced, duration_s=seconds)
            passes[traced] = (decode_as(ops.pop("GET"), Op), decode_as(ops.pop("SET"), Op))
        if traced_first:
            self.tracer.resume(self.target)  # the matrix is traced
        (ug, us), (tg, ts) = passes[False], passes[True]
        return {"backend": self.tracer.name, "cell": f"read-heavy {size} B", "duration_s": seconds,
                **{side: {"get_tps": g.tps, "get_p99_us": g.p99_us, "set_tps": s.tps}
                   for side, (g, s) in (("untraced", (ug, us)), ("traced", (tg, ts)))},
                "order": "traced first" if traced_first else "untraced first", "untraced_side": untraced,
                "get_tps_ratio": tg.tps / ug.tps if ug.tps and tg.tps is not None else None,
                "get_p99_ratio": tg.p99_us / ug.p99_us if ug.p99_us and tg.p99_us is not None else None,
                "note": "one pass each: a single pair on a noisy machine; benchmarks/overhead.py takes medians"}

    def run(self, on_progress=None, measure_overhead: bool = False):
        """Run the whole matrix. Stops early (recording kept) when the server dies."""
        matrix = self.settings.matrix()
        try:
            if measure_overhead:
                if on_progress:
                    on_progress(0, len(matrix), "measuring tracer overhead")
                document.set_overhead(self.doc, self.measure_overhead())
                self.checkpoint()
            else:
                self.tracer.start(self.target)
            for extra in (self.replicas, self.cluster):
                if extra is not None:
                    extra.start()
            timing = self.doc.get("timing")
            if isinstance(timing, dict):
                timing["tracer_ready"] = time.time()
            for i, (repeat, workload, size, extra, rate) in enumerate(matrix):
                stopping.check()  # a signal whose exception was dropped (stopping.py): stop before the next run
                if on_progress:
                    on_progress(i, len(matrix), f"{workload} {size} B #{repeat}"
                                + (f" at {rate:,.0f}/s" if rate else "") + (f" fsync +{extra / 1e6:g} ms" if extra else ""))
                run = document.outcome(self.run_one(repeat, workload, size, extra, rate))
                gone = self.target.gone()
                if gone or (run.status == "failed" and not self.target.alive()):
                    how = {"signal": gone.signal, "status": gone.status, "cause": gone.cause} if gone else {}
                    document.add_warning(
                        self.doc, "server_ended", gone=bool(gone), **how, workload=workload, value_size=size, repeat=repeat,
                        at_s=run.server_exit.at_s if run.server_exit else None, not_measured=len(matrix) - i - 1)
                    break
            stopping.check()  # the last run's, likewise: an interrupted recording, not a complete one
            if on_progress:
                on_progress(len(matrix), len(matrix), "done")
        finally:
            self.tracer.stop()
