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

from valkeytrace.errors import VTUsageError
from valkeytrace.recording import document


def _role(doc: dict) -> str | None:
    r = ((doc.get("server") or {}).get("replication") or {}).get("role")
    if r in ("master", "primary"):
        return "primary"
    if r in ("slave", "replica"):
        return "replica"
    cfg = (doc.get("server") or {}).get("config") or {}
    return "replica" if (cfg.get("replicaof") or cfg.get("slaveof")) else None


def match(docs: list[dict], names: list[str]) -> tuple[int, list[int]]:
    """(the primary's index, the replicas' indexes), or a VTUsageError naming the recording."""
    for d, n in zip(docs, names):
        if d.get("nodes"):
            raise VTUsageError(f"{n} holds {len(d['nodes'])} nodes already: merge takes one node's recording each")
        if not any(r.get("status") == "ok" and r.get("server") for r in d.get("runs", [])):
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
    prepl = docs[p]["server"].get("replication") or {}
    replicas = []
    for i, d in enumerate(docs):
        if i == p:
            continue
        rrepl = d["server"].get("replication") or {}
        same_id = rrepl.get("master_replid") and rrepl.get("master_replid") == prepl.get("master_replid")
        listed = any(isinstance(v, dict) and str(v.get("port")) == str(d["server"].get("port"))
                     for k, v in prepl.items() if k.startswith("slave"))
        port = rrepl.get("master_port")
        if not (same_id or (rrepl.get("master_link_status") != "up" and listed)) or \
                (port is not None and int(port) != int(docs[p]["server"].get("port") or -1)):
            raise VTUsageError(f"{names[i]} is not a replica of {names[p]}'s server: replication id "
                               f"{rrepl.get('master_replid')} and primary port {port}, against "
                               f"{prepl.get('master_replid')} and port {docs[p]['server'].get('port')}")
        replicas.append(i)
    return p, replicas


def _ok(doc: dict) -> list[tuple[int, dict]]:
    return [(i, r) for i, r in enumerate(doc.get("runs", []))
            if r.get("status") == "ok" and r.get("server") and r.get("window_start") and r.get("window_end")]


def pair_windows(primary: dict, replica: dict) -> list[tuple[int, int]]:
    """(primary run index, replica run index): each primary window with the replica window it
    overlaps the most (wall clock), none when no replica window overlaps it."""
    out = []
    theirs = _ok(replica)
    for i, r in _ok(primary):
        best, j_best = 0.0, None
        for j, q in theirs:
            ov = min(r["window_end"], q["window_end"]) - max(r["window_start"], q["window_start"])
            if ov > best:
                best, j_best = ov, j
        if j_best is not None:
            out.append((i, j_best))
    return out


def build(primary: dict, primary_name: str, replicas: list[dict]) -> dict:
    """The merged document. replicas: {doc, name, pairs, offset_ns, error_ns, source, estimate}."""
    out = copy.deepcopy(primary)
    srv = primary["server"]
    nodes = [{"role": "primary", "pid": srv.get("pid"), "port": srv.get("port"), "version": srv.get("version"),
              "config": srv.get("config"), "host": primary.get("host"), "recording": primary_name}]
    unpaired = 0
    for k, rep in enumerate(replicas):
        d = rep["doc"]
        rs = d["server"]
        node = {"role": "replica", "pid": rs.get("pid"), "port": rs.get("port"), "version": rs.get("version"),
                "config": rs.get("config"), "primary_port": srv.get("port"), "host": d.get("host"),
                "recording": rep["name"], "clock_offset_ns": rep["offset_ns"], "clock_source": rep["source"]}
        if rep.get("error_ns") is not None:
            node["clock_error_ns"] = rep["error_ns"]
        if rep.get("estimate") is not None:
            node["clock_exchange_ns"] = rep["estimate"]
        nodes.append(node)
        theirs = dict(rep["pairs"])
        for i, run in enumerate(out["runs"]):
            j = theirs.get(i)
            if j is None:
                if run.get("status") == "ok" and k == 0:
                    unpaired += 1
                continue
            if len(run.get("replicas") or []) != k:
                continue  # an earlier replica had no window here: positions would not line up
            w = copy.deepcopy(d["runs"][j]["server"])
            if w.get("start_mono_ns") is not None:
                w["start_mono_ns"] = int(w["start_mono_ns"]) - int(rep["offset_ns"])
            run.setdefault("replicas", []).append(w)
    out["nodes"] = nodes
    out["merged_from"] = [primary_name] + [r["name"] for r in replicas]
    if unpaired:
        document.add_warning(out, "merge_unpaired", windows=unpaired)
    return out
