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


def key_shards(keyspace: int, ranges: list[list[tuple[int, int]]]) -> np.ndarray:
    """For key:000000000000 .. keyspace - 1, the shard (its index in ranges: each shard's slot ranges) whose slots
    hold it (-1: a slot no shard serves)."""
    from valkey.crc import key_slot

    owner = np.full(SLOTS, -1, dtype=np.int64)
    for shard, spans in enumerate(ranges):
        for a, b in spans:
            owner[a:b + 1] = shard
    slots = np.fromiter((key_slot(b"key:%012d" % i) for i in range(keyspace)), dtype=np.int64, count=keyspace)
    return owner[slots]


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
    offload: Any = None       # a primary's tracers.offload.OffloadStats (--emulate-offload) but shard 0's (the session's)
    node_id: str = ""


@dataclass
class Cluster:
    """The launched cluster: nodes in shard order, each shard's primary first."""
    shards: int
    replicas: int
    node_timeout_ms: int
    nodes: list[Node] = field(default_factory=list)
    slots: list = field(default_factory=list)  # per shard its slot ranges [(first, last)]
    config_syncs: Any = None  # tracers.config_fsync.ConfigSyncs (a backend that loads eBPF)
    _offload_at: dict = field(default_factory=dict)  # node index -> its offload's counters at the window's start

    def primaries(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "primary"]

    def traced(self) -> list[Node]:
        """The nodes with tracers of their own (every node but shard 0's primary), in order."""
        return [n for n in self.nodes if n.tracer is not None]

    def launch(self, first, make_node: Callable[[int, str], tuple[Any, Any, Any]]) -> None:
        """first: shard 0's primary, launched; make_node(shard, role) -> (target, tracer, offload or None) launches one
        more node."""
        self.nodes.append(Node(0, "primary", first))
        self.slots = [[r] for r in slot_ranges(self.shards)]
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
        for p, ((a, b),) in zip(self.primaries(), self.slots):
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
        self._offload_at = {i: n.offload.snapshot() for i, n in enumerate(self.nodes) if n.offload is not None}

    def window_end(self) -> list:
        """runs[].node_windows: one entry per node but the first (shard 0's primary, the recording's server), in
        nodes' order; None for a node without a tracer of its own (--cluster-seed: on another host)."""
        from valkeytrace.tracers.offload import window

        out: list = []
        for i, n in enumerate(self.nodes[1:], 1):
            if n.tracer is None:
                out.append(None)
                continue
            gone = n.target.gone()
            try:
                w = n.tracer.window_end(gone.mono_ns if gone else None)
            except Exception:  # a node killed (--failover) may leave its tracer nothing to read
                w = None
            figures = window(self._offload_at.get(i), n.offload.snapshot()) if n.offload is not None else None
            if w is not None and figures is not None:  # (its counters' file outlives a killed node)
                w["offload"] = figures
            out.append(w)
        return out

    def config_window(self) -> dict | None:
        """runs[].config_fsync: the window's nodes.conf syncs (None without the probes)."""
        return self.config_syncs.end() if self.config_syncs is not None else None

    def describe(self) -> dict:
        """The recording's `cluster`: shards (slots, nodes), each node's role, port, pid, node id."""
        nodes = [{"shard": n.shard, "role": n.role, "port": n.target.port, "pid": n.target.pid, "node_id": n.node_id,
                  "traced": n.tracer is not None or n is self.nodes[0]} for n in self.nodes]
        return {"shards": [{"shard": i, "slots": [list(r) for r in spans], "primary_port": self.primary(i).target.port,
                            "ports": [n.target.port for n in self.nodes if n.shard == i]}
                           for i, spans in enumerate(self.slots)],
                "nodes": nodes, "replicas": self.replicas, "node_timeout_ms": self.node_timeout_ms or None}

    def stop(self) -> None:
        """The launched nodes stopped (an attached cluster's are only observed: their stop() does nothing)."""
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


# -- record --cluster-seed: a running cluster, found from one of its nodes ----------------------------------------
class _ShardNode(msgspec.Struct):
    """A node of a CLUSTER SHARDS entry."""
    id: str = ""
    port: int = 0
    ip: str = ""
    endpoint: str = ""
    role: str = ""
    health: str = ""


def _pairs(x: list) -> dict:
    """A RESP2 flat [key, value, ...] list as a dict, its keys decoded."""
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in zip(x[::2], x[1::2])}


def shards_of(client) -> list[tuple[list[tuple[int, int]], list[_ShardNode]]]:
    """CLUSTER SHARDS: each shard's slot ranges and its nodes (the primary first), shards in slot order."""
    out = []
    for raw in client.execute_command("CLUSTER SHARDS"):
        entry = dict(zip([k.decode() if isinstance(k, bytes) else k for k in raw[::2]], raw[1::2]))
        spans = [int(v) for v in next((v for k, v in entry.items() if k == "slots"), [])]
        nodes = msgspec.convert([_pairs(n) for v in (v for k, v in entry.items() if k == "nodes") for n in v],
                                list[_ShardNode], strict=False)
        if spans:
            nodes.sort(key=lambda n: n.role != "master")
            out.append((list(zip(spans[::2], spans[1::2])), nodes))
    return sorted(out, key=lambda s: s[0][0])


def local_pid(host: str, port: int) -> int | None:
    """The pid of the process listening on port when host is this host's, else None."""
    import ipaddress
    import psutil

    try:
        here = ipaddress.ip_address(host).is_loopback or host in {a.address for addrs in psutil.net_if_addrs().values()
                                                                   for a in addrs}
    except ValueError:
        here = host == "localhost"
    if not here:
        return None
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return c.pid
    return None


class RemoteNode:
    """A node on another host: measured only from the clients (no pid, nothing to trace or stop)."""
    mode, pid, workdir, binary = "remote", None, None, None

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port

    def client(self):
        from valkeytrace.server.process import connect

        return connect(self.host, self.port)

    def gone(self):
        return None

    def stop(self) -> None:
        pass


def discover(seed: str) -> tuple[list, list]:
    """--cluster-seed HOST:PORT: (per shard its slot ranges, per shard its nodes as (host, port, role, pid or None)),
    shards in slot order; VTUsageError when the seed does not answer as a cluster node."""
    from valkeytrace.errors import VTUsageError
    from valkeytrace.server.process import connect

    host, _, port = seed.rpartition(":")
    try:
        found = shards_of(connect(host or "127.0.0.1", int(port)))
    except ValueError:
        raise VTUsageError(f"--cluster-seed {seed!r}: expected HOST:PORT") from None
    except Exception as exc:
        raise VTUsageError(f"--cluster-seed {seed}: CLUSTER SHARDS did not answer: {exc}") from None
    if not found:
        raise VTUsageError(f"--cluster-seed {seed}: the cluster has no slots assigned")
    return ([spans for spans, _ in found],
            [[(n.endpoint or n.ip or host, n.port, "primary" if n.role == "master" else "replica",
               local_pid(n.endpoint or n.ip or host, n.port)) for n in nodes if n.health != "fail"] for _, nodes in found])
