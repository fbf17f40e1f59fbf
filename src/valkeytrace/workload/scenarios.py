"""The #4029 workloads as scenarios: what runs against the server in one cell, and where the
measured window opens and closes.

- read-heavy: the keyspace filled with values of the cell's size, a steady SET load (set_clients)
  behind, and GET (get_clients) measured; before it, when asked, two short GET passes for the
  what-if: GET alone, and GET with the background clients reading instead of writing;
- write-only: SET (write_clients) measured, alone;
- none: nothing runs; the window is open for the duration (observing a server under its own load).

A scenario fills in a run's `ops` (recording.document builds them) and calls the window hooks it
is given: begin() when the measured client starts, end() when it stops. The recorder owns the
hooks (tracer, server view, CPU accounting) and the matrix; benchmark scripts use the same
scenarios for their loads (BENCH_LOAD).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from valkeytrace import system
from valkeytrace.workloads import REPLICA_OP
from valkeytrace.errors import VTError
from valkeytrace.recording import document
from valkeytrace.system import MeasuredClient
from valkeytrace.workload.parse import ClientReport
from valkeytrace.workload import keyspace as ks
from valkeytrace.workload import placement
from valkeytrace.workload.clients import BenchmarkClient
from valkeytrace.workload.openloop import OpenLoopClient, Spec, op_record, replica_op_record, replica_reads
from valkeytrace.workload.benchmark import (ENDLESS_REQUESTS, BenchmarkError, ClientProcess, RateMemo, WindowAccept,
                                            calibrate, client_argv, measured_client, run_measured, run_requests,
                                            window_accept)

BACKGROUND_SETTLE_S = 0.3  # the background load is running before the measured window opens
DEMAND_REQUESTS_PER_CLIENT = 1000  # the GET-only demand pass: under a second at ~70K GET/s here
DEMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Load:
    """Who drives a cell against which server: the benchmark client and the client counts."""
    client: BenchmarkClient
    host: str
    port: int
    server_pid: int | None
    connect: Callable[[], Any]  # a valkey client connection to the server
    keyspace: int = 100000
    get_clients: int = 50
    set_clients: int = 8
    write_clients: int = 50
    rate: float | None = None       # open loop: the measured op's requests due per second (workload/openloop.py)
    arrival: str = "poisson"
    set_rate: float | None = None   # read-heavy's background SETs open-loop at this rate (else closed loop)
    # the open loop's connections: "clients" (the op's closed-loop count, one request in flight each:
    # a request due while all wait is held, late) or "grow" (a pool that grows, then pipelines)
    pool: str = "clients"
    rates: dict | None = field(default=None, compare=False)  # RateMemo's store: the recorder's, per side
    # the launch's keyspace: {"size": S} while every key holds a value of S bytes (a fill of S, then
    # SETs of S only): a read-heavy run of S needs no fill then
    keyspace_state: dict | None = field(default=None, compare=False)
    acked: Any = field(default=None, compare=False)  # --verify-durability: durability_check.AckedWrites
    stall_log: str | None = None  # the shim's stall log (tracers/stalls.py): open-loop latencies split by stall
    replica_port: int | None = None  # --replica-get-clients: readers on this replica during write-only
    replica_readers: int = 0
    # how far a closed-loop window may miss its duration and be kept (recorder.Settings.window_accept)
    window_accept: WindowAccept = field(default_factory=window_accept)
    shards: tuple = ()  # record --cluster: cluster_load.Shard each; the measured op goes by slot, its latency per shard
    failover: Any = field(default=None, compare=False)  # record --failover: workload.failover.Failover

    def by_shard(self, run: dict, op: str, rate: float, size: int, duration_s: float, clients: int,
                 on_start, on_end) -> MeasuredClient:
        """The measured op by slot, every shard's client at once (workload/cluster_load.py): runs[].ops[op] the
        system's, runs[].shards[i].ops[op] each shard's."""
        from valkeytrace.workload import cluster_load

        base = Spec(self.host, self.port, op, rate, duration_s, self.keyspace, size, self.arrival,
                    connections=clients if self.pool == "clients" or not rate else None, stall_log=self.stall_log)
        failover = self.failover if op == "SET" and self.failover is not None and not self.failover.fired else None
        results = cluster_load.run_shards(self.shards, base, self.client.cpus, on_start, on_end, failover)
        if failover is not None:
            run["failover"] = failover.finish(self.keyspace)
        return MeasuredClient(cluster_load.record_ops(run, op, self.shards, results).cpu_s)

    def fill(self, size: int) -> None:
        """The keyspace filled with values of size: each shard's keys through its primary under --cluster."""
        if not self.shards:
            ks.fill(self.connect(), self.keyspace, size)
            return
        import numpy as np
        import valkey

        for s in self.shards:
            with valkey.Valkey(host=s.host, port=s.port) as client:
                ks.fill_keys(client, np.fromfile(s.keys_path, dtype=np.uint32), size)

    def open_loop(self, op: str, rate: float, size: int, duration_s: float, clients: int,
                  readers: bool = False) -> "OpenLoopClient":
        """rate 0: a closed loop over `clients` connections; readers: the replica readers beside it."""
        path = self.acked.next_path() if self.acked is not None and op == "SET" else None
        readers = readers and bool(self.replica_readers and self.replica_port)
        seen = self.acked.next_path("seen") if readers and self.acked is not None else None
        spec = Spec(self.host, self.port, op, rate, duration_s, self.keyspace, size, self.arrival,
                    connections=clients if self.pool == "clients" or not rate else None, acked_path=path,
                    stall_log=self.stall_log, replica_port=self.replica_port if readers else None,
                    readers=self.replica_readers if readers else 0, seen_path=seen,
                    seq_epoch=self.acked.epoch if self.acked is not None else None,
                    cut_at=self.acked.cut_at if path else 0.0)
        return OpenLoopClient(spec, cpus=self.client.cpus, acked=self.acked)

    @classmethod
    def for_server(cls, server, client, **counts) -> "Load":
        """A load against a server.process target (EmbeddedServer, CommandServer, AttachedServer)."""
        return cls(client=client, host=server.host, port=server.port, server_pid=server.pid,
                   connect=server.client, **counts)

    def argv(self, test: str, clients: int, size: int, requests: int = ENDLESS_REQUESTS) -> list[str]:
        """The benchmark client's command line (in its --cluster mode under record --cluster)."""
        argv = client_argv(self.client, self.host, self.port, test, clients, size, self.keyspace, requests)
        return argv + ["--cluster"] if self.shards else argv

    def memo(self, run: dict, test: str, size: int) -> RateMemo | None:
        """Where a run of this cell keeps its rate for the next (the recorder's store), or None."""
        if self.rates is None:
            return None
        return RateMemo(self.rates, (test, size, self.get_clients if test == "GET" else self.write_clients,
                                     run.get("workload"), run.get("fsync_extra_delay_ns") or 0))


# the benchmark scripts' cell: read-heavy, 64 B, GET c=50 under SET c=8, 20000 keys (filled fast)
BENCH_KEYSPACE, BENCH_VALUE = 20000, 64


def bench_load(server, client) -> Load:
    return Load.for_server(server, client, keyspace=BENCH_KEYSPACE)


class ReadHeavy:
    name = "read-heavy"
    drives_load = True

    def __init__(self, load: Load):
        self.load = load

    def prepare(self, size: int) -> None:
        state = self.load.keyspace_state
        if state is not None and state.get("size") == size:
            return  # filled with values of this size already, this launch
        self.load.fill(size)
        if state is not None:
            state["size"] = size

    def background(self, size: int, test: str = "SET") -> ClientProcess:
        """The steady background load, SET unless told (endless; stop() it)."""
        proc = ClientProcess(self.load.argv(test, self.load.set_clients, size), self.load.client.cpus)
        if self.load.client.cpus:  # placed: it shares a CPU with the GET clients (placement.prefer_background)
            placement.prefer_background(proc.proc.pid)
        return proc

    def _settled_background(self, size: int, test: str = "SET") -> ClientProcess:
        """The background load, running for BACKGROUND_SETTLE_S; stopped again if it exits at once
        or anything interrupts the wait."""
        background = self.background(size, test)
        try:
            time.sleep(BACKGROUND_SETTLE_S)
            if background.proc.poll() is not None:
                raise BenchmarkError(f"background {test} client exited at once: {background.output.strip()[-200:]!r}")
        except BaseException:
            background.stop()
            raise
        return background

    def foreground(self, size: int, requests: int = ENDLESS_REQUESTS) -> ClientProcess:
        """The GET clients as a process of their own (benchmark scripts' slices)."""
        return ClientProcess(self.load.argv("GET", self.load.get_clients, size, requests), self.load.client.cpus)

    def calibrate(self, size: int) -> float:
        """GET requests a second the foreground reaches alone (to size a fixed-count slice)."""
        ld = self.load
        return calibrate(ld.client, ld.argv("GET", ld.get_clients, size))

    def demand(self, size: int) -> dict:
        """The service demand of the measured GET alone: a short GET-only pass (no SET, so no AOF
        write and no fsync, whatever the appendfsync policy), with the CPU the server and the
        client took (host_cpu, as for a measured window). The what-if (analysis/whatif.py)
        builds on it."""
        ld = self.load
        requests = ld.get_clients * DEMAND_REQUESTS_PER_CLIENT
        snaps = [system.cpu_snapshot(ld.server_pid)]
        report = run_requests(ld.client, ld.argv("GET", ld.get_clients, size, requests),
                              timeout_s=DEMAND_TIMEOUT_S, on_end=lambda: snaps.append(system.cpu_snapshot(ld.server_pid)))
        out = {**self._pass_record(report, requests),
               "host_cpu": document.plain(system.cpu_window(snaps[0], snaps[1], measured_client(report)))}
        if not ld.set_clients:
            return out
        try:
            out["loaded"] = self.demand_loaded(size, requests)
        except (VTError, OSError) as exc:
            out["loaded"] = {"error": str(exc)}
        return out

    def demand_loaded(self, size: int, requests: int) -> dict:
        """The same GET pass with the background clients running too, but reading (GET): the
        cell's client population and its CPU on this host, and still no AOF write and no fsync.
        What the cell would be if the SETs were acknowledged without waiting for any fsync
        (the what-if's early-acknowledgement end; analysis/whatif.py)."""
        ld = self.load
        background = self._settled_background(size, "GET")
        try:
            marks = [0.0, 0.0]
            report = run_requests(ld.client, ld.argv("GET", ld.get_clients, size, requests), timeout_s=DEMAND_TIMEOUT_S,
                                  on_start=lambda: marks.__setitem__(0, time.monotonic()),
                                  on_end=lambda: marks.__setitem__(1, time.monotonic()))
            bg = background.window_summary(*marks)
        finally:
            background.stop()
        return {**self._pass_record(report, requests),
                "background": {"op": "GET", "clients": ld.set_clients, "tps": bg.tps,
                               "mean_us": None if bg.mean_latency_ms is None else bg.mean_latency_ms * document.US_PER_MS,
                               "samples": bg.samples}}

    def _pass_record(self, report: ClientReport, requests: int) -> dict:
        """A what-if pass's GET figures, from the client's parsed report."""
        lat = report.latency_ms
        return {"op": "GET", "clients": self.load.get_clients, "requests": requests, "seconds": report.window_s,
                "tps": report.tps, "mean_us": lat.avg * document.US_PER_MS, "p50_us": lat.p50 * document.US_PER_MS,
                "p99_us": lat.p99 * document.US_PER_MS}

    def run(self, run: dict, size: int, duration_s: float, window, with_demand: bool = False) -> MeasuredClient:
        """Measure one cell into run; window(client_pids) -> (begin, end). Returns the measured
        client's own CPU figures (benchmark.measured_client)."""
        ld = self.load
        self.prepare(size)
        if with_demand and not ld.shards:  # a cluster's demand pass: not yet
            try:
                run["demand"] = self.demand(size)
            except (VTError, OSError) as exc:  # context for the what-if, never a reason to lose the run
                run["demand"] = {"error": str(exc)}
        if ld.set_rate:
            return self._open_background(run, size, duration_s, window)
        background = self._settled_background(size)
        try:
            begin, end = window((background.pid,))
            marks = [0.0, 0.0]

            def on_start():
                marks[0] = time.monotonic()
                begin()

            def on_end():
                marks[1] = time.monotonic()
                end()
            client = self._measured_get(run, size, duration_s, on_start, on_end)
            bg = background.window_summary(*marks)
        finally:
            background.stop()
        document.set_op(run, "SET", document.background_op(
            clients=ld.set_clients, tps=bg.tps, mean_ms=bg.mean_latency_ms, samples=bg.samples,
            progress=background.progress_series(background.started_mono), command=background.argv))
        return client

    def _measured_get(self, run: dict, size: int, duration_s: float, on_start, on_end) -> MeasuredClient:
        """The measured GETs: open-loop under record --rate (latency from each one's due moment), else the
        benchmark client sized to the window; the client's own CPU figures."""
        ld = self.load
        if ld.shards:
            return ld.by_shard(run, "GET", ld.rate or 0.0, size, duration_s, ld.get_clients, on_start, on_end)
        if ld.rate:
            result = ld.open_loop("GET", ld.rate, size, duration_s, ld.get_clients).run(on_start, on_end)
            document.set_op(run, "GET", op_record(result))
            return MeasuredClient(result.cpu_s)
        report = run_measured(ld.client, lambda n: ld.argv("GET", ld.get_clients, size, n), duration_s,
                              on_start=on_start, on_end=on_end, memo=ld.memo(run, "GET", size),
                              accept=ld.window_accept)
        document.set_op(run, "GET", document.op_record(report, "measured"))
        return measured_client(report)  # (under --set-rate it was the report itself: the client's CPU was lost)

    def _open_background(self, run: dict, size: int, duration_s: float, window) -> MeasuredClient:
        """--set-rate: the background SETs open-loop too, a client of their own started first."""
        ld = self.load
        assert ld.set_rate is not None  # --set-rate given
        bg = ld.open_loop("SET", ld.set_rate, size, duration_s + 2 * BACKGROUND_SETTLE_S + 2.0, ld.set_clients)
        out: list = []
        t = threading.Thread(target=lambda: out.append(bg.run()), daemon=True)
        t.start()
        try:
            time.sleep(BACKGROUND_SETTLE_S + 0.3)  # its warm-up, then the measured GETs
            begin, end = window((bg.proc.pid,))
            client = self._measured_get(run, size, duration_s, begin, end)
        finally:
            t.join(duration_s + 60)
        if out:
            document.set_op(run, "SET", {**op_record(out[0]), "role": "background"})
        return client


class WriteOnly:
    name = "write-only"
    drives_load = True

    def __init__(self, load: Load):
        self.load = load

    def run(self, run: dict, size: int, duration_s: float, window, with_demand: bool = False) -> MeasuredClient:
        ld = self.load
        if ld.keyspace_state is not None and ld.keyspace_state.get("size") != size:
            ld.keyspace_state.clear()  # its SETs leave values of another size among the keys
        begin, end = window(())
        if ld.shards:
            return ld.by_shard(run, "SET", ld.rate or 0.0, size, duration_s, ld.write_clients, begin, end)
        # open loop (record --rate): latency from each SET's due moment; or valkeytrace's client in a closed loop
        # when values must carry their sequence (--verify-durability) or readers follow the writers on a replica
        if ld.rate or ld.acked is not None or ld.replica_readers:
            result = ld.open_loop("SET", ld.rate or 0.0, size, duration_s, ld.write_clients, readers=True).run(begin, end)
            document.set_op(run, "SET", op_record(result))
            if result.replica is not None:
                document.set_op(run, REPLICA_OP, replica_op_record(result, result.replica, ld.replica_readers))
                run["replica_reads"] = replica_reads(result.replica, ld.replica_readers)
            return MeasuredClient(result.cpu_s)
        report = run_measured(ld.client, lambda n: ld.argv("SET", ld.write_clients, size, n), duration_s,
                              on_start=begin, on_end=end, memo=ld.memo(run, "SET", size),
                              accept=ld.window_accept)
        document.set_op(run, "SET", document.op_record(report, "measured"))
        return measured_client(report)


class Observe:
    name = "none"
    drives_load = False

    def __init__(self, load: Load | None = None):
        self.load = load

    wait = None  # (seconds) -> returns early when the server ends (the recorder's target.wait_exit)

    def run(self, run: dict, size: int, duration_s: float, window, with_demand: bool = False) -> MeasuredClient:
        begin, end = window(())
        begin()
        if self.wait is not None:
            self.wait(duration_s)
        else:
            time.sleep(duration_s)
        end()
        return measured_client(None)


SCENARIOS = {s.name: s for s in (ReadHeavy, WriteOnly, Observe)}


def scenario(name: str, load: Load | None) -> ReadHeavy | WriteOnly | Observe:
    if name == Observe.name:
        return Observe(load)
    if load is None:
        raise ValueError(f"the {name} workload needs a load")
    return ReadHeavy(load) if name == ReadHeavy.name else WriteOnly(load)


__all__ = ["Load", "ReadHeavy", "WriteOnly", "Observe", "SCENARIOS", "scenario", "bench_load"]
