"""valkeytrace merge: the recordings of one system's nodes, each made where its node runs (`record
--attach PID`, observing), as one recording, the shape `record --replicas` gives: the primary's
document, each of its runs with the replicas' windows beside its own (runs[].replicas[]), and
`nodes` naming every node (role, pid, port, version, config, host, the recording it came from, and
a replica's clock offset from the primary's with its error).

- Nodes are matched by replication: one recording's server is a primary (INFO replication role
  master), every other one a replica of it: its primary's port is that node's, and its replication
  id is the primary's (a replica that synced takes its primary's id) or, when its link was not up
  yet as its recording began, the primary listed it (slaveN: port) among its replicas; anything
  else is refused.
- Windows are paired by wall-clock overlap (each host's realtime clock: within the hosts' NTP
  error, far below a window's seconds); the replica's window moves to the primary's
  CLOCK_MONOTONIC by the offset the caller estimated (analysis/replink.exchange: from the
  replication exchange itself), so every offset inside it reads on the primary's clock.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import msgspec

from valkeytrace.errors import VTUsageError
from valkeytrace.recording import document
from valkeytrace.recording.model import Document, Node, decode


@dataclass
class Joined:
    """A replica's recording as merged: where its windows go and its clock against the primary's."""
    doc: dict                  # as read (its windows are copied from it whole)
    typed: Document            # the same, decoded
    name: str
    pairs: list[tuple[int, int]]  # (primary run, replica run)
    offset_ns: int             # its clock minus the primary's
    error_ns: int | None
    source: str
    estimate: int | None = None  # one host: what the exchange estimated all the same


def _role(doc: Document) -> str | None:
    repl, cfg = doc.server.replication or {}, doc.server.config
    r = repl.get("role")
    if r in ("master", "primary"):
        return "primary"
    if r in ("slave", "replica"):
        return "replica"
    return "replica" if (cfg.get("replicaof") or cfg.get("slaveof")) else None


def _is_replica_of(d: Document, p: Document) -> bool:
    """By its primary's replication id (a replica that synced takes it) or, its link not up yet, by the
    primary listing its port (slaveN), and by the primary port it names."""
    prepl, rrepl = p.server.replication or {}, d.server.replication or {}
    same_id = rrepl.get("master_replid") and rrepl.get("master_replid") == prepl.get("master_replid")
    listed = any(isinstance(v, dict) and str(v.get("port")) == str(d.server.port)
                 for k, v in prepl.items() if k.startswith("slave"))
    port = rrepl.get("master_port")
    return bool(same_id or (rrepl.get("master_link_status") != "up" and listed)) and \
        (port is None or int(port) == int(p.server.port or -1))


def match(docs: list[Document], names: list[str]) -> tuple[int, list[int]]:
    """(the primary's index, the replicas' indexes), or a VTUsageError naming the recording."""
    for d, n in zip(docs, names):
        if d.nodes:
            raise VTUsageError(f"{n} holds {len(d.nodes)} nodes already: merge takes one node's recording each")
        if not any(r.status == "ok" and r.server for r in d.runs):
            raise VTUsageError(f"{n} has no traced window to merge")
    roles = [_role(d) for d in docs]
    unknown = [n for n, r in zip(names, roles) if r is None]
    if unknown:
        raise VTUsageError(f"{unknown[0]}: its server's replication role was not recorded (a recording made before "
                           "valkeytrace kept INFO replication): record it again")
    primaries = [i for i, r in enumerate(roles) if r == "primary"]
    if len(primaries) != 1:
        raise VTUsageError(f"merge needs one primary among its recordings; found {len(primaries)}"
                           + (f" ({', '.join(names[i] for i in primaries)})" if primaries else ""))
    p = primaries[0]
    prepl = docs[p].server.replication or {}
    for i, d in enumerate(docs):
        if i != p and not _is_replica_of(d, docs[p]):
            rrepl = d.server.replication or {}
            raise VTUsageError(f"{names[i]} is not a replica of {names[p]}'s server: replication id "
                               f"{rrepl.get('master_replid')} and primary port {rrepl.get('master_port')}, against "
                               f"{prepl.get('master_replid')} and port {docs[p].server.port}")
    return p, [i for i in range(len(docs)) if i != p]


def _ok(doc: Document) -> list[tuple[int, tuple[float, float]]]:
    return [(i, (r.window_start, r.window_end)) for i, r in enumerate(doc.runs)
            if r.status == "ok" and r.server and r.window_start and r.window_end]


def pair_windows(primary: Document, replica: Document) -> list[tuple[int, int]]:
    """(primary run index, replica run index): each primary window with the replica window it
    overlaps the most (wall clock), none when no replica window overlaps it."""
    out = []
    theirs = _ok(replica)
    for i, (a, b) in _ok(primary):
        best, j_best = 0.0, None
        for j, (c, d) in theirs:
            ov = min(b, d) - max(a, c)
            if ov > best:
                best, j_best = ov, j
        if j_best is not None:
            out.append((i, j_best))
    return out


def _node(doc: Document, role: str, name: str, **more) -> dict:
    s = doc.server
    node = Node(role=role, pid=s.pid, port=s.port, version=s.version, config=s.config, host=doc.host, recording=name,
                **more)
    return {k: v for k, v in msgspec.to_builtins(node).items() if v is not None}


def build(primary: dict, primary_name: str, replicas: list[Joined]) -> dict:
    """The merged document: the primary's, each paired run with the replicas' windows beside its own."""
    out = copy.deepcopy(primary)
    p = decode(primary)
    nodes = [_node(p, "primary", primary_name)]
    runs, unpaired = out["runs"], 0
    for k, rep in enumerate(replicas):
        nodes.append(_node(rep.typed, "replica", rep.name, primary_port=p.server.port, clock_offset_ns=rep.offset_ns,
                           clock_source=rep.source, clock_error_ns=rep.error_ns, clock_exchange_ns=rep.estimate))
        theirs, their_runs = dict(rep.pairs), rep.doc["runs"]
        for i, (run, typed) in enumerate(zip(runs, p.runs)):
            j = theirs.get(i)
            if j is None:
                unpaired += typed.status == "ok" and k == 0
                continue
            if len(typed.replicas) != k:
                continue  # an earlier replica had no window here: positions would not line up
            window = rep.typed.runs[j].server
            if window is None:
                continue  # paired windows are ok runs with a window
            w = copy.deepcopy(their_runs[j]["server"])
            if window.start_mono_ns is not None:
                w["start_mono_ns"] = int(window.start_mono_ns) - int(rep.offset_ns)
            run.setdefault("replicas", []).append(w)
            typed.replicas.append(window)
    out["nodes"] = nodes
    out["merged_from"] = [primary_name] + [r.name for r in replicas]
    if unpaired:
        document.add_warning(out, "merge_unpaired", windows=unpaired)
    return out
