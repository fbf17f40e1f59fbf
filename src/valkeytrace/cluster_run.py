"""record --cluster (and --cluster-seed: attach()): the nodes beyond shard 0's primary (which the session launches as any server), each under
the side's settings: its own tracer (the primaries' fsync delay, or the replicas' under --replica-fsync-delay),
on a primary its own virtual offload (--emulate-offload, its --offload-replicas stream), the cluster formed
(server/cluster.py), and the shards' routes for the load (each shard's keys in a file in shard 0's scratch
directory, removed with it)."""
from __future__ import annotations

import functools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from valkeytrace.errors import VTUsageError
from valkeytrace.plan import RecordPlan, parse_failover
from valkeytrace.server.cluster import Cluster, key_shards, keys_file, node_config


@dataclass
class ClusterParts:
    cluster: Cluster
    offloads: list = field(default_factory=list)  # tracers.offload.OffloadStats of shards 1.. 's primaries
    shards: tuple = ()                             # workload.cluster_load.Shard each
    dir: str | None = None                         # --cluster-seed: where the shards' key files are (removed)

    def close(self) -> None:
        self.cluster.stop()
        for o in self.offloads:
            o.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def _env(tracer, extra: dict) -> dict:
    """os.environ with the tracer's launch environment and extra, LD_PRELOAD's libraries joined."""
    env = {**os.environ, **tracer.launch_env()}
    for k, v in extra.items():
        have = env.get(k) if k == "LD_PRELOAD" else None
        env[k] = v if not have else have if v in have.split() else f"{have} {v}"
    return env


def _node(plan: RecordPlan, parts: ClusterParts, cut, run_as, shard: int, role: str) -> tuple[Any, Any, Any]:
    """One more node (its target, its tracer, a primary's virtual offload) under the side's settings; nothing left
    running if it fails."""
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers import offload as voff
    from valkeytrace.tracers.emulation import shim_library
    from valkeytrace.tracers.factory import make_tracer

    s, e, t = plan.server, plan.emulation, plan.tracer
    tracer = make_tracer(t.backend, t.block_threshold_us, e.fsync_delay if role == "primary" else e.replicas_delay,
                         t.aof_flush_probe, t.loop_sample, t.socket_writes)
    extra: dict = {}
    if cut is not None and role == "primary" and parse_failover(s.failover, s.cluster)[0] == shard:
        extra = cut.environment({}, run_as)
    offload = None
    if role == "primary" and e.offload:
        offload = voff.OffloadStats(e.offload, gather_ns=e.gather_ns, max_pending=e.max_pending,
                                    overflow=e.overflow, replicas=e.offload_replicas, design=e.design)
        parts.offloads.append(offload)
        extra = {**extra, **offload.env(), "LD_PRELOAD": shim_library()}
    if run_as:
        tracer.chown_region(*run_as)
        if offload is not None:
            offload.chown(*run_as)
    target = None
    try:
        target = EmbeddedServer(appendfsync=s.appendfsync, io_threads=s.io_threads,
                                server_config=node_config(s.config, s.cluster_node_timeout_ms), binary=s.binary,
                                env=_env(tracer, extra), run_as=run_as, ready_timeout_s=s.timeout_s)
        if offload is not None:
            target.drain_state = offload.state  # its stop waits for the offload's drain, as shard 0's primary's
            offload.load_commands(target.client())
            voff.check_engaged(target.pid or 0)
    except BaseException:
        if target is not None:
            target.stop()
        tracer.stop()
        raise
    return target, tracer, offload


def _config_syncs(cluster: Cluster) -> None:
    """The nodes' nodes.conf syncs apart (tracers/config_fsync.py): each node's (on this host) data and AOF
    directories as it says."""
    from valkeytrace.tracers.config_fsync import ConfigSyncs

    nodes = []
    for n in cluster.nodes:
        if n.target.pid:
            c = n.target.client()
            where = next(iter(c.config_get("dir").values()), "")
            aofdir = next(iter(c.config_get("appenddirname").values()), "appendonlydir")
            nodes.append((n.target.port, n.target.pid, where, aofdir))
    cluster.config_syncs = ConfigSyncs(nodes)


def _routes(plan: RecordPlan, parts: ClusterParts, directory: str) -> None:
    """The shards' routes for the load: each shard's keys (by CRC16 slot) in a file in directory, its primary."""
    from valkeytrace.workload.cluster_load import Shard

    owner = key_shards(plan.settings.keyspace, parts.cluster.slots)
    parts.shards = tuple(Shard(i, parts.cluster.primary(i).target.host, parts.cluster.primary(i).target.port,
                               keys_file(directory, (owner == i).nonzero()[0], i), int((owner == i).sum()))
                         for i in range(parts.cluster.shards))


def launch(plan: RecordPlan, first, run_as, cut=None) -> ClusterParts:
    """The rest of the cluster around first (shard 0's primary, launched with node_config), formed and synced;
    stopped again, whatever it had started, when any of it fails. cut: --failover's power-cut record (its shim's
    log goes to the failing shard's primary when that is not shard 0's)."""
    s = plan.server
    parts = ClusterParts(Cluster(s.cluster, s.replicas, s.cluster_node_timeout_ms))
    try:
        parts.cluster.launch(first, functools.partial(_node, plan, parts, cut, run_as))
        if plan.tracer.backend in ("ebpf", "both"):
            _config_syncs(parts.cluster)
        _routes(plan, parts, first.workdir)
    except BaseException:
        parts.close()
        raise
    return parts


def attach(plan: RecordPlan, first) -> ClusterParts:
    """record --cluster-seed: the running cluster's nodes (CLUSTER SHARDS), first (the node attached as the
    recording's server) leading; each other node whose process runs on this host attached and traced by a tracer of
    its own, the others measured only from the clients. Nothing of theirs is ever stopped."""
    from valkeytrace.server.cluster import Node, RemoteNode, discover
    from valkeytrace.server.process import AttachedServer
    from valkeytrace.tracers.factory import make_tracer

    t = plan.tracer
    slots, shards = discover(plan.server.cluster_seed)
    parts = ClusterParts(Cluster(len(slots), max(len(n) for n in shards) - 1, 0))
    parts.cluster.slots = slots
    parts.dir = tempfile.mkdtemp(prefix="valkeytrace-cluster-")
    try:
        for shard, nodes in enumerate(shards):
            for host, port, role, pid in nodes:
                if pid == first.pid:
                    parts.cluster.nodes.insert(0, Node(shard, role, first))
                    continue
                tracer = make_tracer(t.backend, t.block_threshold_us, None, t.aof_flush_probe, t.loop_sample,
                                     t.socket_writes) if pid else None
                parts.cluster.nodes.append(Node(shard, role, AttachedServer(pid) if pid else RemoteNode(host, port), tracer))
        if not parts.cluster.nodes or parts.cluster.nodes[0].target is not first:
            raise VTUsageError(f"--cluster-seed {plan.server.cluster_seed}: the node to trace first (pid {first.pid}) "
                               "is not among the nodes CLUSTER SHARDS names")
        if t.backend in ("ebpf", "both"):
            _config_syncs(parts.cluster)
        _routes(plan, parts, parts.dir)
    except BaseException:
        parts.close()
        raise
    return parts
