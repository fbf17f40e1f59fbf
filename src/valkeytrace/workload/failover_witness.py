"""runs[].failover from a failover's marks and reads (workload/failover.py): the timeline, the acknowledged writes
the new primary lacks, and what it holds that the dead primary's AOF, cut as at a power cut at the kill, does not."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from valkeytrace.workload.keyspace import key_name

EXAMPLES_EACH = 3


def sequences(client, keys: np.ndarray, pipelined: bool) -> np.ndarray:
    """Each key's value's sequence (0: absent or none): GETs pipelined (a cluster node refuses a multi-slot MGET),
    else MGET."""
    from valkeytrace.workload.durability_check import _sequence

    out = np.zeros(keys.size, dtype=np.uint64)
    for i in range(0, keys.size, 1000):
        chunk = keys[i:i + 1000]
        if pipelined:
            pipe = client.pipeline(transaction=False)
            for k in chunk:
                pipe.get(key_name(int(k)))
            values = pipe.execute(raise_on_error=False)
        else:
            values = client.mget([key_name(int(k)) for k in chunk])
        out[i:i + chunk.size] = [(_sequence(v) or 0) if isinstance(v, (bytes, type(None))) else 0 for v in values]
    return out


def _s(at: int | None, window: int | None) -> float | None:
    """A moment's seconds into the window."""
    return None if at is None or window is None else round((at - window) / 1e9, 3)


def _floors(fo, keys: np.ndarray, keyspace: int) -> tuple[np.ndarray, str | None]:
    """Each key's acknowledged floor (0: none) from the shard's client's file."""
    from valkeytrace.workload.durability_check import read_kept

    got = read_kept(fo.acked_path, keyspace) if fo.acked_path else "no acknowledged writes were kept"
    if isinstance(got, str):
        return np.zeros(keys.size, dtype=np.uint64), f"the shard's acknowledged writes: {got}"
    return got[1][keys], None


def _durable(fo, keys: np.ndarray) -> tuple[np.ndarray | None, str | None]:
    """Each key's sequence in the dead primary's state at the kill as a power cut leaves it (its files cut to
    what its completed syncs had made durable), loaded by a plain server; (None, why) when it cannot be built."""
    from valkeytrace.workload import powercut
    from valkeytrace.workload.boundary import listing
    from valkeytrace.workload.durability_check import plain_server

    pc = fo.cut
    if pc is None:
        return None, "no record of the primary's syncs"
    node = pc.nodes[0]
    work = tempfile.mkdtemp(prefix="valkeytrace-failover-")
    try:
        files = listing(node.where[0], (node.where[1],))
        side, kept, _ = powercut._side(pc, node, files, fo.marks.kill)
        powercut.build(node.where[0], work, {k: v for k, v in kept[side].items() if v is not None})
        binary = fo.cluster.primary(fo.shard).target.binary
        with plain_server(binary, work, {**node.settings, "appenddirname": node.where[1]}) as client:
            return sequences(client, keys, pipelined=False), None
    except Exception as exc:  # OSError, VTError, a state that did not load: the witness says why; the run is kept
        return None, f"the dead primary's power-cut state: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _examples(keys: np.ndarray, mask: np.ndarray, what: str, **columns: np.ndarray) -> list[dict]:
    return [{"key": key_name(int(keys[i])).decode(), "what": what, **{k: int(v[i]) for k, v in columns.items()}}
            for i in np.flatnonzero(mask)[:EXAMPLES_EACH]]


def witness(fo, keyspace: int) -> dict:
    """runs[].failover (recording.model.Failover)."""
    m = fo.marks
    kill, ack = m.kill, m.first_ack
    out: dict = {"shard": fo.shard, "killed_at_s": _s(kill, m.window), "promoted": fo.promoted_seq is not None,
                 "promoted_port": fo.new_port, "promoted_at_s": _s(m.promoted, m.window),
                 "first_ack_at_s": _s(ack, m.window),
                 "unavailable_ms": round((ack - kill) / 1e6, 1) if kill and ack else None,
                 "acked": 0, "acked_missing": 0, "promoted_dirty": 0, "examples": []}
    errors = [fo.error]
    if fo.promoted_seq is not None and kill:
        keys, promoted = fo.keys(), fo.promoted_seq
        floors, why = _floors(fo, keys, keyspace)
        errors.append(why)
        missing = (floors > 0) & (promoted < floors)
        durable, why = _durable(fo, keys)
        errors.append(why)
        kill_seq = np.uint64(kill + fo.epoch)
        dirty = (promoted > durable) & (promoted <= kill_seq) if durable is not None else np.zeros(keys.size, bool)
        out.update(acked=int((floors > 0).sum()), acked_missing=int(missing.sum()),
                   promoted_dirty=int(dirty.sum()) if durable is not None else None,
                   examples=_examples(keys, missing, "acked_missing", acked_floor=floors, promoted=promoted)
                   + _examples(keys, dirty, "promoted_dirty", promoted=promoted,
                               durable=durable if durable is not None else promoted))
    error = "; ".join(e for e in errors if e)
    return {**out, **({"error": error} if error else {})}
