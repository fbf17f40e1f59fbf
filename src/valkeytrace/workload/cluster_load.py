"""record --cluster: the measured op by slot. Each shard's keys (key:%012d whose CRC16 slot it owns,
server/cluster.key_shards) go to that shard's primary through a client of its own (valkeytrace's, csrc/vt_load.c,
drawing from the shard's key list), all the shards' clients at once: closed loop (rate 0, the op's connections
shared out) or open loop (the rate shared out by the shards' key counts: Poisson streams that add up to one of
the whole rate). Each request's shard is its client's, so the latencies split by shard; the system's figures are
the shards' merged (their histograms added, their counts summed)."""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Callable

import msgspec

from valkeytrace.workload.openloop import LoadResult, OpenLoopClient, OpenLoopError, Spec, op_record


@dataclass(frozen=True)
class Shard:
    """Where a shard's requests go and which keys it owns (the key numbers' file, uint32)."""
    shard: int
    host: str
    port: int
    keys_path: str
    nkeys: int


class _Edges:
    """The window opens when the first shard's client opens its own, and closes when the last one's closes."""

    def __init__(self, n: int, on_start: Callable | None, on_end: Callable | None):
        self.lock, self.open, self.closed, self.n = threading.Lock(), 0, 0, n
        self.on_start, self.on_end = on_start, on_end

    def start(self) -> None:
        with self.lock:
            self.open += 1
            if self.open == 1 and self.on_start:
                self.on_start()

    def end(self) -> None:
        with self.lock:
            self.closed += 1
            if self.closed == self.n and self.on_end:
                self.on_end()


def run_shards(shards: tuple[Shard, ...], base: Spec, cpus, on_start=None, on_end=None,
               failover=None) -> list[LoadResult | None]:
    """Every shard's client at once for the op of base (its rate and connections shared out); each one's
    result in shard order (None where its client failed, the others' kept, or where the shard owns no key: no client
    runs for it, as one with no key would draw from the whole keyspace, and a rate of 0 is a closed loop). failover (workload/failover.py):
    its shard's client keeps its acknowledged floors, and it is called once the window opened (the kill)."""
    loaded = [i for i, s in enumerate(shards) if s.nkeys]  # a shard owning no key of the keyspace: no client
    if not loaded:
        raise OpenLoopError("no shard owns a key of the keyspace")
    if failover is not None and failover.shard not in loaded:
        raise OpenLoopError(f"--failover: shard {failover.shard} owns no key of the keyspace (a larger --keyspace)")
    total = sum(s.nkeys for s in shards)
    conns = max(1, -(-(base.connections or 0) // len(loaded))) if base.connections else None
    specs = {i: _spec(base, shards[i], total, conns) for i in loaded}
    if failover is not None:
        failover.acked_path = shards[failover.shard].keys_path + ".acked"
        specs[failover.shard] = dataclasses.replace(specs[failover.shard], acked_path=failover.acked_path,
                                                    seq_epoch=failover.epoch, survive=True)
    clients = {i: OpenLoopClient(spec, cpus=cpus) for i, spec in specs.items()}
    edges = _Edges(len(clients), on_start, on_end)
    if failover is not None:
        edges.on_start = lambda: (on_start() if on_start else None, failover())
    results: list[LoadResult | None] = [None] * len(shards)
    errors: list[str] = []

    def one(i: int) -> None:
        try:
            results[i] = clients[i].run(edges.start, edges.end)
        except OpenLoopError as exc:
            errors.append(f"shard {shards[i].shard}: {exc}")
            edges.end()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if all(r is None for r in results):
        raise OpenLoopError("; ".join(errors) or "no shard's client reported")
    return results


def _spec(base: Spec, s: Shard, total: int, conns: int | None) -> Spec:
    """base for shard s: its share of the rate and connections, its keys (Spec is a frozen dataclass)."""
    return dataclasses.replace(base, host=s.host, port=s.port, rate=base.rate * s.nkeys / total,
                               connections=conns, seed=base.seed + s.shard, keys_path=s.keys_path,
                               stall_log=base.stall_log if s.shard == 0 else None)


LOAD_COUNTS = ("due", "sent", "answered", "answered_in_window", "answered_drained", "late", "errors", "unanswered",
          "rejected", "acked", "conns", "pipelined", "held")


def merged(results: list[LoadResult]) -> LoadResult:
    """The system's result: the shards' counts summed, their histograms added, the longest window."""
    from valkeytrace.histogram import LatencyHistogram

    first = results[0]
    hist = {k: LatencyHistogram.merged(LatencyHistogram.from_dict(getattr(r, k)) for r in results).to_dict()
            for k in ("corrected", "service")}
    return msgspec.structs.replace(
        first, rate=sum(r.rate for r in results), window_s=max(r.window_s for r in results),
        answered_span_s=max(r.answered_span_s for r in results), cpu_s=sum(r.cpu_s for r in results),
        held_max=max(r.held_max for r in results), in_stall=None, outside=None, replica=None, cut=None,
        **{k: sum(getattr(r, k) for r in results) for k in LOAD_COUNTS}, **hist)


def record_ops(run: dict, op: str, shards: tuple[Shard, ...], results: list[LoadResult | None]) -> LoadResult:
    """run's ops[op] (the system's) and shards[i].ops[op] (each shard's); the system's result."""
    from valkeytrace.recording import document

    run["shards"] = [{"shard": s.shard, "port": s.port, "keys": s.nkeys, "ops": {op: op_record(r)} if r is not None else {}}
                     for s, r in zip(shards, results)]
    system = merged([r for r in results if r is not None])
    document.set_op(run, op, op_record(system))
    return system
