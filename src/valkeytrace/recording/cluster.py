"""The recording's cluster (record --cluster): its shards and nodes (`cluster`) and a failover's witness
(runs[].failover): part of recording/model.py, which imports them (docs/recording-format.md)."""
from __future__ import annotations

from valkeytrace.recording.fields import NonNeg, NonNegInt, Record, _l


class ClusterShard(Record):
    shard: NonNegInt = 0         # its index: shard 0 holds the first slots
    slots: list[list[NonNegInt]] = _l()  # its slot ranges, [first, last] each
    primary_port: NonNegInt | None = None  # its primary's port at launch
    ports: list[NonNegInt] = _l()  # its nodes' ports, the primary's first


class ClusterNode(Record):
    shard: NonNegInt = 0         # the shard it serves
    role: str = "primary"        # primary or replica, at launch
    port: NonNegInt | None = None
    pid: NonNegInt | None = None
    node_id: str = ""            # CLUSTER MYID
    traced: bool = False         # whether valkeytrace traced its threads (else measured only from the clients)


class Cluster(Record):
    shards: list[ClusterShard] = _l()
    nodes: list[ClusterNode] = _l()  # in shard order, each shard's primary first; runs[].node_windows follow it
    replicas: NonNegInt = 0      # replicas per shard
    node_timeout_ms: NonNegInt | None = None  # cluster-node-timeout


class Failover(Record):
    shard: NonNegInt = 0         # the shard whose primary was killed (SIGKILL)
    killed_at_s: NonNeg | None = None  # seconds into the window
    promoted: bool = False       # whether a replica of it became its primary
    promoted_port: NonNegInt | None = None  # that replica's port
    promoted_at_s: NonNeg | None = None  # seconds into the window when it said role:master
    first_ack_at_s: NonNeg | None = None  # the first write the new primary acknowledged (seconds into the window)
    unavailable_ms: NonNeg | None = None  # from the kill to that first acknowledged write: the shard's clients could not write
    acked: NonNegInt = 0         # keys of the shard with a write acknowledged by the dead primary (its client does not follow the promotion)
    acked_missing: NonNegInt = 0  # of which the new primary lacks that value and every later one
    promoted_dirty: NonNegInt | None = 0  # keys the new primary holds at a sequence the dead primary's AOF, cut at its last sync, lacks (null: not built)
    examples: list[dict] = _l()  # a few of each, key and sequences
    error: str | None = None     # why a part could not be measured


class ConfigFsyncNode(Record):
    port: NonNegInt | None = None
    count: NonNegInt = 0
    total_ms: NonNeg = 0.0
    max_ms: NonNeg = 0.0


class ConfigFsync(Record):
    count: NonNegInt = 0         # the main threads' syncs of files outside their AOF directory (nodes.conf, its directory)
    total_ms: NonNeg = 0.0       # their time, entry to return
    max_ms: NonNeg = 0.0         # the longest
    nodes: list[ConfigFsyncNode] = _l()  # per node with any
