"""record --failover SHARD@T: a shard's primary killed (SIGKILL) T seconds into the open-loop write-only window,
its replica promoted by the cluster, and the witness of what the promotion kept and lost (runs[].failover).

Timeline: the kill; the promotion (a replica of the shard says role:master, polled every few ms); the first write
the new primary acknowledged (a witness SET of a key of the shard's slots outside the keyspace, tried on each
replica until one takes it: before the promotion they answer MOVED). unavailable_ms runs from the kill to that
acknowledgment: the shard's clients could not write in between (their client's connections to the dead primary
close at the kill: cluster_load's failover shard survives it, its later requests unanswered; the other shards' go
on).

The witness, once the new primary acknowledged: every key of the shard read from it (`promoted`), the values'
sequences (the shard's client writes each SET's sequence, CLOCK_MONOTONIC plus an epoch, in its first 16 bytes,
and keeps each key's acknowledged floor: csrc/vt_load.c). acked_missing: keys with an acknowledged write whose
value on the new primary is older than that write (lost by the promotion). promoted_dirty: keys the new primary
holds at a sequence sent before the kill that the dead primary's AOF, cut as a power cut at the kill would have
left it (workload/powercut.py: each file cut to what its completed syncs had made durable), does not hold: writes
a replica took before its primary made them durable (--offload-replicas immediate), which a crash of the primary
followed by a failover makes the cluster's truth though no disk ever held them."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from valkeytrace.workload.failover_witness import sequences, witness

POLL_S = 0.005
PROMOTION_TIMEOUT_S = 30.0


def witness_key(first_slot: int, last_slot: int) -> bytes:
    """A key outside the keyspace whose slot the shard owns."""
    from valkey.crc import key_slot

    return next(k for i in range(1 << 20) if first_slot <= key_slot(k := b"vt:failover:%d" % i) <= last_slot)


def _role(client) -> str:
    """INFO replication's role of a node (valkey-py's client)."""
    from valkeytrace.server.cluster import node_state

    return node_state(client.info("replication")).role


@dataclass
class Marks:
    """The failover's moments, CLOCK_MONOTONIC ns (None: not reached)."""
    window: int | None = None     # the load's window opened
    kill: int | None = None       # SIGKILL sent
    promoted: int | None = None   # a replica said role:master
    first_ack: int | None = None  # the new primary acknowledged the witness SET


class Failover:
    """One launch's failover: the shard, when, the cluster's nodes, the power cut's record of the primary's syncs."""

    def __init__(self, cluster, shard: int, at_s: float, keys_path: str, slots: tuple[int, int], cut: Any = None):
        self.cluster, self.shard, self.at_s, self.cut = cluster, shard, at_s, cut
        self.keys_path, self.slots = keys_path, slots
        self.epoch = time.time_ns() - time.monotonic_ns()  # the sequences' clock: its SETs' values carry it
        self.acked_path: str | None = None  # the shard's client's acknowledged floors (cluster_load sets it)
        self.marks = Marks()
        self.promoted_seq: np.ndarray | None = None
        self.new_port: int | None = None
        self.error: str | None = None
        self._thread: threading.Thread | None = None

    @property
    def fired(self) -> bool:
        """Whether a window has had its kill already: a failover happens once (a second window's would kill
        nothing, its marks then before its own start)."""
        return self.marks.window is not None

    def __call__(self) -> None:
        """The load's hook, called once its window opened: the kill and the promotion in a thread of their own;
        once only (later calls do nothing)."""
        if self.fired:
            return
        self.marks.window = time.monotonic_ns()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            time.sleep(self.at_s)
            primary = self.cluster.primary(self.shard)
            self.marks.kill = time.monotonic_ns()
            primary.target.kill()
            self._promotion()
        except Exception as exc:  # the witness says why it is incomplete; the load goes on
            self.error = f"{type(exc).__name__}: {exc}"

    def _promotion(self) -> None:
        """Tried on each replica of the shard until one acknowledges the witness SET; then the shard's keys read."""
        import valkey

        key = witness_key(*self.slots)
        reps = [n for n in self.cluster.nodes if n.shard == self.shard and n.role == "replica"]
        clients = [valkey.Valkey(host=n.target.host, port=n.target.port, socket_timeout=2.0) for n in reps]
        try:
            self._first_ack(key, reps, clients)
        finally:
            for c in clients:
                c.close()

    def _first_ack(self, key: bytes, reps: list, clients: list) -> None:
        import valkey

        deadline = time.monotonic() + PROMOTION_TIMEOUT_S
        while time.monotonic() < deadline:
            for n, c in zip(reps, clients):
                try:
                    if self.marks.promoted is None and _role(c) == "master":
                        self.marks.promoted = time.monotonic_ns()
                    c.set(key, b"%016x" % (time.monotonic_ns() + self.epoch))
                except valkey.exceptions.ValkeyError:
                    continue
                self.marks.first_ack = time.monotonic_ns()
                if self.marks.promoted is None:
                    self.marks.promoted = self.marks.first_ack
                self.new_port = n.target.port
                self.promoted_seq = sequences(c, self.keys(), pipelined=True)
                return
            time.sleep(POLL_S)
        self.error = f"no replica of shard {self.shard} acknowledged a write within {PROMOTION_TIMEOUT_S:g} s of the kill"

    def keys(self) -> np.ndarray:
        return np.fromfile(self.keys_path, dtype=np.uint32)

    def finish(self, keyspace: int) -> dict:
        """runs[].failover, once the load ended (the shard's client wrote its acknowledged floors)."""
        if self._thread is not None:
            self._thread.join(PROMOTION_TIMEOUT_S + self.at_s + 5)
        return witness(self, keyspace)
