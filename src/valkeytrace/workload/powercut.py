"""record --verify-durability power-cut: what a power cut leaves, built from the trace of the server's syncs.

The cut: a moment inside each open-loop SET window (CUT_AT of it, while the writes still flow); the client
keeps only the acknowledgments it read by then (csrc/vt_load.c, cut_after_ns). After the last window the
server is killed (SIGKILL) and its data directory (the AOF directory, the RDB, the manifest) is copied in the
state the cut left: each file cut to the bytes its syncs had made durable by the cut (workload/boundary.py;
the kernel's record when eBPF ran, else the shim's; under an emulated disk delay, --inject-fsync-delay, the
shim's, whose syncs end when the emulated disk's do: the kernel's return comes before the added delay), a
file whose name no directory sync covered absent; with --torn also states with one file cut at a few random
points between its boundary and its end (a torn tail: `aof-load-truncated yes` must cope). A plain
valkey-server loads each state and every key whose latest acknowledged SET came before the cut is looked up,
as the kill's check does (durability_check.py). Bytes written after the cut are in the copy only up to the
boundary, so nothing the server did after the cut can count (a file it deleted after the cut, an AOF
rewrite's end, is not rebuilt). With --replicas the cut is the whole host's: each replica's files at the same
moment, loaded and checked against the same acknowledgments.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from valkeytrace.errors import VTError
from valkeytrace.recording.model import CutState
from valkeytrace.workload import boundary
from valkeytrace.workload.durability_check import compare_acked, plain_server, reload_settings

CUT_AT = 0.8      # the cut's moment, as a share of each SET window
TORN_CUTS = 3     # --torn: random cut points per file that grew past its boundary


@dataclass
class Node:
    """One server's records: its shim log (None: no shim preloaded), its kernel probe, what the probe took as
    durable when it attached, its data directory and AOF directory's name, its port."""
    label: str
    shim_log: str | None = None
    probe: Any = None  # tracers.durable_bpf.DurableProbe
    baseline: dict[int, int] = field(default_factory=dict)
    where: tuple[str, str] = ("", "appendonlydir")
    settings: dict = field(default_factory=dict)  # its AOF settings a reload needs (durability_check.reload_settings)
    port: int = 0

    def traces(self) -> dict[str, boundary.Trace]:
        out = {}
        if self.probe is not None:
            events, dropped = self.probe.events(boundary.EVENT)
            out["ebpf"] = boundary.Trace(events, self.baseline, dropped)
        shim = boundary.read_shim_log(self.shim_log) if self.shim_log else None
        if shim is not None:
            out["shim"] = boundary.Trace(shim[0], {}, shim[1])  # it sees the server from its first call
        return out


class PowerCut:
    """The launch's power-cut machinery, one Node per server (the primary's first, then each replica's): the
    shim's log (a shim preloaded maps it), the kernel's probe (a backend that loads eBPF); close() removes all."""

    def __init__(self, backend: str, torn: bool, delayed: bool = False, seed: int = 1):
        self.backend, self.torn, self.rng = backend, torn, random.Random(seed)
        self.delayed = delayed  # the shim adds an emulated disk's delay to each sync: its record is the disk's
        self.dir = tempfile.mkdtemp(prefix="valkeytrace-powercut-")
        self.nodes = [Node("primary")]

    def _log(self, node: Node, run_as) -> dict:
        node.shim_log = os.path.join(self.dir, f"durable-{len(os.listdir(self.dir))}.log")
        boundary.new_shim_log(node.shim_log)
        if run_as:
            os.chown(self.dir, *run_as)
            os.chown(node.shim_log, *run_as)
        return {"VALKEYTRACE_DURABLE_LOG": node.shim_log}

    def environment(self, env: dict, run_as) -> dict:
        """The primary's environment, with its shim's log."""
        return {**env, **self._log(self.nodes[0], run_as)}

    def replica_env(self, run_as) -> dict:
        """The next replica's addition to its environment: its shim's log (used when it preloads the shim)."""
        self.nodes.append(Node(f"replica {len(self.nodes)}"))
        return self._log(self.nodes[-1], run_as)

    def attach(self, node: int, pid: int, port: int, config: dict) -> None:
        """The kernel's probe for a node's pid (when the backend loads eBPF); what stands now is its baseline.
        config: the server's (CONFIG GET's): its data directory and AOF settings."""
        n = self.nodes[node]
        n.settings = reload_settings(config)
        where = n.where = (config.get("dir") or "", n.settings.get("appenddirname") or "appendonlydir")
        n.port = port
        if self.backend not in ("ebpf", "both"):
            return
        from valkeytrace.tracers.durable_bpf import DurableProbe

        try:
            n.probe = DurableProbe(pid)
        except Exception as exc:  # the compiler's or the kernel's refusal, in one line
            raise VTError(f"--verify-durability power-cut: the durable-boundary probe did not load: {exc}") from exc
        n.baseline = boundary.baseline(boundary.listing(where[0], (where[1],)))

    def close(self) -> None:
        for n in self.nodes:
            if n.probe is not None:
                n.probe.close()
                n.probe = None
        shutil.rmtree(self.dir, ignore_errors=True)


def states(files: list[boundary.FileEntry], kept: dict[str, int | None], torn: bool,
           rng: random.Random) -> list[tuple[dict[str, int], str | None]]:
    """The states to load: (bytes kept per file present, the torn file or None): the boundary's first."""
    base = {name: n for name, n in kept.items() if n is not None}
    out: list[tuple[dict[str, int], str | None]] = [(base, None)]
    if torn:
        for f in files:
            n = base.get(f.name)
            if n is not None and f.size > n + 1:
                for cut in sorted(rng.sample(range(n + 1, f.size), min(TORN_CUTS, f.size - n - 1))):
                    out.append(({**base, f.name: cut}, f.name))
    return out


def build(src: str, dst: str, kept: dict[str, int]) -> None:
    """dst: each file of src named in kept, its first kept[name] bytes (directories made as needed)."""
    for name, n in kept.items():
        path = os.path.join(dst, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(os.path.join(src, name), "rb") as fin, open(path, "wb") as fout:
            left = n
            while left > 0:
                chunk = fin.read(min(left, 1 << 20))
                if not chunk:
                    break
                fout.write(chunk)
                left -= len(chunk)


def load(binary: str, state_dir: str, settings: dict[str, str], latest: np.ndarray) -> tuple[int, int, list[dict], int | None]:
    """A plain server started on state_dir (it loads what is there) with the server's AOF settings, then its
    acknowledged keys compared (durability_check: keys checked, missing, examples, the oldest missing floor)."""
    with plain_server(binary, state_dir, settings) as client:
        return compare_acked(client, latest)


def _files(files: list[boundary.FileEntry], kept: dict[str, dict[str, int | None]]) -> list[dict]:
    """runs[].durability_check.files: each file's size and durable bytes by backend (absent: its name not)."""
    rows = []
    for f in files:
        absent = sorted(side for side, k in kept.items() if k[f.name] is None)
        rows.append({"name": f.name, "size": f.size, "durable": {side: k[f.name] or 0 for side, k in kept.items()},
                     **({"absent": absent} if absent else {})})
    return rows


class _Failed(Exception):
    pass


@dataclass
class _NodeCut:
    """One server's states at the cut, each loaded and checked."""
    states: list[CutState]
    files: list[dict]
    boundary_from: str
    oldest: int | None  # the oldest lost acknowledged SET's sequence


def _cut_node(pc: PowerCut, node: Node, binary: str, cut_ns: int, latest: np.ndarray, torn: bool) -> _NodeCut:
    """One server's states at the cut, each loaded and checked."""
    from valkey.exceptions import ValkeyError

    files = boundary.listing(node.where[0], (node.where[1],))
    traces = node.traces()
    full = {side: t.dropped for side, t in traces.items() if t.dropped}
    if not traces or full:
        raise _Failed(f"{node.label}: " + ("no record of its syncs" if not traces else
                      f"the sync log filled ({full} records not kept): the boundary would be too early"))
    kept = {side: boundary.boundaries(t, files, cut_ns) for side, t in traces.items()}
    side = "shim" if "shim" in kept and (pc.delayed or "ebpf" not in kept) else "ebpf"
    rows: list[CutState] = []
    oldest: int | None = None
    for state, torn_file in states(files, kept[side], torn, pc.rng):
        work = tempfile.mkdtemp(prefix="valkeytrace-cutstate-")
        try:
            build(node.where[0], work, state)
            checked, missing, examples, old = load(binary, work, {**node.settings, "appenddirname": node.where[1]}, latest)
        except (OSError, VTError, ValkeyError) as exc:
            raise _Failed(f"{node.label}: a state did not load: {exc}") from exc
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows.append(CutState(kept=state, torn=torn_file, acked=checked, acked_missing=missing, examples=examples))
        if old is not None:
            oldest = old if oldest is None else min(oldest, old)
    return _NodeCut(rows, _files(files, kept), side, oldest)


def verify(pc: PowerCut, binary: str, acked) -> dict:
    """runs[].durability_check for a power cut of the whole host (module docstring): the primary's states, and
    each replica's at the same cut (its boundary's); acked: durability_check.AckedWrites."""
    how = (f"a power cut {CUT_AT:.0%} into the last SET window: acknowledgments after it not kept; after the window "
           f"the server killed (SIGKILL) and each file of its data directory cut to what its syncs had made durable "
           f"by the cut, loaded by a plain {os.path.basename(binary)}")
    acked.collect()
    unread = acked.unread()
    out: dict = {"method": "power-cut", "how": how, "acked": 0, "acked_missing": 0, "writes_acked": acked.writes,
                 "examples": [], "runs": acked.parts(), **({"error": unread} if unread else {})}
    if acked.cut is None:
        return {**out, "error": "; ".join(filter(None, ("no open-loop SET window carried the cut (--workload "
                                                         "write-only with --rate)", unread)))}
    cut_ns, cut_seq = acked.cut
    try:
        got = [_cut_node(pc, n, binary, cut_ns, acked.latest, pc.torn and i == 0) for i, n in enumerate(pc.nodes)]
    except _Failed as exc:
        return {**out, "error": str(exc)}
    primary, replicas = got[0], got[1:]
    worst = max(primary.states, key=lambda r: r.acked_missing)
    return {**out, "acked": worst.acked, "acked_missing": worst.acked_missing, "examples": worst.examples,
            "states": [msgspec.to_builtins(r) for r in primary.states], "files": primary.files,
            "boundary_from": primary.boundary_from, "lost_window_ms": _window(cut_seq, primary.oldest),
            **({"replicas": [_replica_row(n, r, cut_seq) for n, r in zip(pc.nodes[1:], replicas)]} if replicas else {})}


def _window(cut_seq: int, oldest: int | None) -> float:
    return round((cut_seq - oldest) / 1e6, 1) if oldest is not None else 0.0


def _replica_row(node: Node, got: _NodeCut, cut_seq: int) -> dict:
    """runs[].durability_check.replicas[]: a replica's state at the cut, checked against the clients' acks."""
    st = got.states[0]
    return {"port": node.port, "acked": st.acked, "acked_missing": st.acked_missing, "examples": st.examples,
            "kept": st.kept, "files": got.files, "boundary_from": got.boundary_from,
            "lost_window_ms": _window(cut_seq, got.oldest)}
