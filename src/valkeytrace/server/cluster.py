"""record --cluster N: a Valkey cluster of N primaries (each with --replicas R replicas) launched on loopback,
every node the embedded server (or --server-binary) under the side's settings, its nodes.conf and data in its
own scratch directory (removed when it stops, as any launched server's).

The session launches shard 0's primary itself (the recording's `server`, traced by the main tracer); this module
launches the other nodes, each traced by a tracer of its own, gives each primary an even share of the 16384 slots
(CLUSTER ADDSLOTSRANGE), joins them (CLUSTER MEET), makes each replica follow its primary (CLUSTER REPLICATE) and
waits for cluster_state:ok on every node and every replica in sync. The key map (`shard_keys`) is what routes the
workloads' keys by slot: key:%012d's CRC16 slot (valkey-py's key_slot), the shard that owns it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec
import numpy as np

from valkeytrace.errors import VTError

SLOTS = 16384
FORM_TIMEOUT_S = 30.0
# full coverage off: while a shard fails over, the others keep serving (a failover needs most primaries alive)
CLUSTER_CONFIG = {"cluster-enabled": "yes", "cluster-config-file": "nodes.conf",
                  "cluster-require-full-coverage": "no", "cluster-allow-replica-migration": "no"}


def node_config(config: dict, node_timeout_ms: int) -> dict:
    """A cluster node's config: the side's, cluster-enabled, its bus on a free port of its own (the default,
    port + 10000, may be taken or past 65535)."""
    from valkeytrace.server.process import free_port

    return {**{k: v for k, v in config.items() if k not in ("port", "replicaof", "slaveof")}, **CLUSTER_CONFIG,
            "cluster-node-timeout": str(node_timeout_ms), "cluster-port": str(free_port())}


def slot_ranges(n: int) -> list[tuple[int, int]]:
    """The 16384 slots in n even, contiguous ranges (first, last), shard 0 first."""
    bounds = [round(i * SLOTS / n) for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(n)]


def key_shards(keyspace: int, n: int) -> np.ndarray:
    """For key:000000000000 .. keyspace - 1, the shard whose slots hold it."""
    from valkey.crc import key_slot

    ranges = slot_ranges(n)
    firsts = np.array([a for a, _ in ranges])
    slots = np.fromiter((key_slot(b"key:%012d" % i) for i in range(keyspace)), dtype=np.int64, count=keyspace)
    return np.searchsorted(firsts, slots, side="right") - 1


class _Known(msgspec.Struct):
    """A CLUSTER NODES line as valkey-py parses it."""
    node_id: str = ""
    flags: str = ""


class _State(msgspec.Struct):
    """What forming the cluster waits on: CLUSTER INFO's and INFO replication's."""
    cluster_state: str = ""
    role: str = ""
    master_link_status: str = ""
    slave_repl_offset: int = -1
    master_repl_offset: int = 0


def node_state(*parts: dict) -> _State:
    return msgspec.convert({k: v for p in parts for k, v in p.items()}, _State, strict=False)


@dataclass
class Node:
    shard: int
    role: str                 # primary or replica
    target: Any               # a server.process.EmbeddedServer (shard 0's primary: the session's target)
    tracer: Any = None        # None for shard 0's primary (the main tracer traces it)
    node_id: str = ""


@dataclass
class Cluster:
    """The launched cluster: nodes in shard order, each shard's primary first."""
    shards: int
    replicas: int
    node_timeout_ms: int
    nodes: list[Node] = field(default_factory=list)
    config_syncs: Any = None  # tracers.config_fsync.ConfigSyncs (a backend that loads eBPF)

    def primaries(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "primary"]

    def traced(self) -> list[Node]:
        """The nodes with tracers of their own (every node but shard 0's primary), in order."""
        return [n for n in self.nodes if n.tracer is not None]

    def launch(self, first, make_node: Callable[[int, str], tuple[Any, Any]]) -> None:
        """first: shard 0's primary, launched; make_node(shard, role) -> (target, tracer) launches one more node."""
        self.nodes.append(Node(0, "primary", first))
        for shard in range(self.shards):
            if shard:
                self.nodes.append(Node(shard, "primary", *make_node(shard, "primary")))
            for _ in range(self.replicas):
                self.nodes.append(Node(shard, "replica", *make_node(shard, "replica")))
        self._form()

    def _form(self) -> None:
        for n in self.nodes:
            n.node_id = n.target.client().execute_command("CLUSTER MYID")
            n.node_id = n.node_id.decode() if isinstance(n.node_id, bytes) else n.node_id
        for p, (a, b) in zip(self.primaries(), slot_ranges(self.shards)):
            p.target.client().execute_command("CLUSTER ADDSLOTSRANGE", a, b)
        first = self.nodes[0].target
        for n in self.nodes[1:]:
            n.target.client().execute_command("CLUSTER MEET", first.host, first.port, self._bus(first))
        self._wait(lambda: all(len(self._known(n)) == len(self.nodes) for n in self.nodes), "every node to know the others")
        for n in self.nodes:
            if n.role == "replica":
                n.target.client().execute_command("CLUSTER REPLICATE", self.primary(n.shard).node_id)
        self._wait(self._ready, "cluster_state:ok and every replica in sync")

    @staticmethod
    def _bus(target) -> int:
        return int(next(iter(target.client().config_get("cluster-port").values()), 0))

    @staticmethod
    def _known(n: Node) -> list[str]:
        known = n.target.client().execute_command("CLUSTER NODES")  # valkey-py: {address: {node_id, flags, ...}}
        lines = msgspec.convert(list(known.values()), list[_Known], strict=False)
        return [v.node_id for v in lines if not {"handshake", "noaddr"} & set(v.flags.split(","))]

    def primary(self, shard: int) -> Node:
        return next(n for n in self.nodes if n.shard == shard and n.role == "primary")

    def _ready(self) -> bool:
        for n in self.nodes:
            c = n.target.client()
            st = node_state(c.cluster("info"), c.info("replication") if n.role == "replica" else {})
            if st.cluster_state != "ok":
                return False
            if n.role == "replica":
                off = node_state(self.primary(n.shard).target.client().info("replication")).master_repl_offset
                if st.master_link_status != "up" or st.slave_repl_offset < off:
                    return False
        return True

    def _wait(self, ok: Callable[[], bool], what: str, timeout_s: float = FORM_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not ok():
            if time.monotonic() > deadline:
                raise VTError(f"--cluster {self.shards}: no {what} within {timeout_s:.0f}s")
            time.sleep(0.1)

    # -- the ReplicaSet's interface for the recorder: the other nodes' tracers and windows ----------------
    def start(self) -> None:
        for n in self.traced():
            n.tracer.start(n.target)

    def window_begin(self, requests: bool = False, observe: bool = False) -> None:
        if self.config_syncs is not None:
            self.config_syncs.begin()
        for n in self.traced():
            if n.target.gone() is None:
                n.tracer.window_begin(requests=requests, observe=observe)

    def window_end(self) -> list:
        out = []
        for n in self.traced():
            gone = n.target.gone()
            try:
                out.append(n.tracer.window_end(gone.mono_ns if gone else None))
            except Exception:  # a node killed (--failover) may leave its tracer nothing to read
                out.append(None)
        return out

    def config_window(self) -> dict | None:
        """runs[].config_fsync: the window's nodes.conf syncs (None without the probes)."""
        return self.config_syncs.end() if self.config_syncs is not None else None

    def describe(self) -> dict:
        """The recording's `cluster`: shards (slots, nodes), each node's role, port, pid, node id."""
        nodes = [{"shard": n.shard, "role": n.role, "port": n.target.port, "pid": n.target.pid, "node_id": n.node_id,
                  "traced": n.tracer is not None or n is self.nodes[0]} for n in self.nodes]
        return {"shards": [{"shard": i, "slots": [list(r)], "primary_port": self.primary(i).target.port,
                            "ports": [n.target.port for n in self.nodes if n.shard == i]}
                           for i, r in enumerate(slot_ranges(self.shards))],
                "nodes": nodes, "replicas": self.replicas, "node_timeout_ms": self.node_timeout_ms}

    def stop(self) -> None:
        if self.config_syncs is not None:
            self.config_syncs.close()
            self.config_syncs = None
        for n in self.nodes[1:]:
            for x in (n.target, n.tracer):
                try:
                    if x is not None:
                        x.stop()
                except Exception:
                    pass


def keys_file(directory: str, keys: np.ndarray, shard: int) -> str:
    """A shard's key numbers for the open-loop client (--keys-file), written in directory."""
    path = os.path.join(directory, f"shard-{shard}.keys")
    keys.astype(np.uint32).tofile(path)
    return path
