"""record --cluster: each shard of a cell apart (cells[].shards): its clients' ops summarized as the cell's are,
its primary's and replicas' server summaries (the tracer windows of the recording's cluster.nodes), and which
shard is slowest."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import msgspec

from valkeytrace.analysis.server import summarize_server
from valkeytrace.analysis.summary import ServerSummary
from valkeytrace.recording.model import Cluster, Document, Run


@dataclass
class ShardSummary:
    shard: int
    port: int | None
    keys: int
    ops: dict                      # op -> tables.OpSummary, its clients' alone
    server: ServerSummary | None = None  # its primary's threads
    replicas: list = field(default_factory=list)  # its replicas' (ServerSummary each)

    def to_json(self, op_json: Callable) -> dict:
        return {"shard": self.shard, "port": self.port, "keys": self.keys,
                "ops": {op: op_json(o) for op, o in self.ops.items()},
                **({"server": self.server.to_json()} if self.server is not None else {}),
                **({"replicas": [r.to_json() for r in self.replicas]} if self.replicas else {})}


def _windows(cluster: Cluster, runs: list[Run], shard: int, role: str) -> list[list]:
    """Per node of the shard in that role, its windows over the runs (shard 0's primary: the runs' own server)."""
    out = []
    for i, n in enumerate(cluster.nodes):
        if n.shard != shard or n.role != role:
            continue
        if i == 0:
            out.append([r.server for r in runs if r.server is not None])
        else:
            out.append([w for r in runs if len(r.node_windows) >= i and (w := r.node_windows[i - 1]) is not None])
    return out


def shard_summaries(doc: Document, runs: list[Run], op_summary: Callable) -> list[ShardSummary]:
    """The cell's shards (runs: its ok runs; op_summary(runs, op): tables' summary of an op over runs)."""
    if doc.cluster is None or not runs or not runs[0].shards:
        return []
    out = []
    for row in runs[0].shards:
        mine = [msgspec.structs.replace(r, ops=r.shards[row.shard].ops) for r in runs if len(r.shards) > row.shard]
        ops = {op: o for op in row.ops if (o := op_summary(mine, op)) is not None}
        primary = next(iter(_windows(doc.cluster, runs, row.shard, "primary")), [])
        out.append(ShardSummary(row.shard, row.port, row.keys, ops, summarize_server(primary),
                                [s for w in _windows(doc.cluster, runs, row.shard, "replica")
                                 if (s := summarize_server(w)) is not None]))
    return out


def slowest(shards: list[ShardSummary], op: str) -> ShardSummary | None:
    """The shard whose clients saw the highest p50 of op."""
    have = [s for s in shards if op in s.ops and s.ops[op].median.p50_us is not None]
    return max(have, key=lambda s: s.ops[op].median.p50_us) if have else None


@dataclass
class ConfigFsyncSummary:
    """The cell's nodes.conf syncs on the nodes' main threads (runs[].config_fsync over its ok runs), apart from
    the AOF's."""
    count: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0
    nodes: dict = field(default_factory=dict)  # port -> count

    def to_json(self) -> dict:
        return {"count": self.count, "total_ms": round(self.total_ms, 3), "max_ms": self.max_ms,
                "nodes": [{"port": p, "count": c} for p, c in sorted(self.nodes.items())]}


def config_fsync(runs: list[Run]) -> ConfigFsyncSummary | None:
    have = [r.config_fsync for r in runs if r.config_fsync is not None]
    if not have:
        return None
    out = ConfigFsyncSummary()
    for c in have:
        out.count += c.count
        out.total_ms += c.total_ms
        out.max_ms = max(out.max_ms, c.max_ms)
        for row in c.nodes:
            out.nodes[row.port] = out.nodes.get(row.port, 0) + row.count
    return out
