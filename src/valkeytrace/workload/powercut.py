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

import contextlib
import os
import random
import signal
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
    pid: int = 0
    no_ebpf: str | None = None  # why the kernel's record is not used (its file system's tracepoints are not ext4's)

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
        n.port, n.pid = port, pid
        if self.backend not in ("ebpf", "both"):
            return
        fs = fs_type(where[0] or ".")
        if fs != "ext4":  # the probe reads ext4's tracepoints: another file system's syncs go unseen
            n.no_ebpf = f"its data directory is on {fs or 'an unknown file system'}, not ext4"
            if n.shim_log and boundary.read_shim_log(n.shim_log) is not None:
                return  # the shim runs in it (it mapped its log): its record is the boundary
            raise VTError(f"--verify-durability power-cut: {n.label}'s {n.no_ebpf}: the eBPF durable-boundary probe reads "
                          "ext4's tracepoints only; use --backend shim or both")
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


def fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the file system path is on: the mount with the longest mount point that contains it."""
    real, best, got = os.path.realpath(path), -1, None
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        head, _, tail = line.partition(" - ")
        parts, rest = head.split(), tail.split()
        if len(parts) < 5 or not rest:
            continue
        point = parts[4].encode().decode("unicode_escape")  # \040 for a space, as the kernel escapes it
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, got = len(point), rest[0]
    return got


def states(files: list[boundary.FileEntry], kept: dict[str, int | None], torn: bool, rng: random.Random,
           reached: dict[str, int] | None = None) -> list[tuple[dict[str, int], str | None]]:
    """The states to load: (bytes kept per file present, the torn file or None): the boundary's first. A torn
    state cuts a file between its boundary and the largest size it had reached by the cut (reached: per the log;
    its size now when not given)."""
    base = {name: n for name, n in kept.items() if n is not None}
    out: list[tuple[dict[str, int], str | None]] = [(base, None)]
    if torn:
        for f in files:
            n, end = base.get(f.name), min(f.size, (reached or {}).get(f.name, f.size))
            if n is not None and end > n + 1:
                for cut in sorted(rng.sample(range(n + 1, end), min(TORN_CUTS, end - n - 1))):
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
    oldest: int | None  # the oldest missing key's floor (durability_check: at or before its lost SET's send)


def _backend_fault(trace: boundary.Trace, files: list[boundary.FileEntry], played: boundary.Replay) -> str | None:
    """Why a backend's record cannot be the boundary: a file grew past its baseline while it saw no sync of any
    file (its probe missed them: a file system whose syncs it does not see)."""
    grew = [f.name for f in files if f.size > trace.baseline.get(f.ino, 0)]
    return f"{grew[0]} grew past its baseline but it saw no sync of any file" if grew and not played.synced else None


def _side(pc: PowerCut, node: Node, files: list[boundary.FileEntry], cut_ns: int):
    """(the backend the boundary is read from, each backend's kept bytes, the chosen one's reach by the cut)."""
    traces = node.traces()
    if node.no_ebpf:
        traces.pop("ebpf", None)
    full = {side: t.dropped for side, t in traces.items() if t.dropped}
    if not traces or full:
        raise _Failed(f"{node.label}: " + ("no record of its syncs" if not traces else
                      f"the sync log filled ({full} records not kept): the boundary would be too early"))
    played = {side: boundary.replay(t, cut_ns) for side, t in traces.items()}
    faults = {side: f for side, t in traces.items() if (f := _backend_fault(t, files, played[side]))}
    kept = {side: boundary.kept_at(r, files) for side, r in played.items()}
    side = "shim" if "shim" in kept and (pc.delayed or "ebpf" not in kept) else "ebpf"
    if side in faults:
        others = [s for s in kept if s not in faults]
        if not others:
            raise _Failed(f"{node.label}: the {side} record: {faults[side]}")
        side = others[0]
    return side, kept, boundary.reached_at(played[side], files)


def _cut_node(pc: PowerCut, node: Node, binary: str, cut_ns: int, latest: np.ndarray, torn: bool) -> _NodeCut:
    """One server's states at the cut, each loaded and checked."""
    from valkey.exceptions import ValkeyError

    try:
        files = boundary.listing(node.where[0], (node.where[1],))
    except OSError as exc:
        raise _Failed(f"{node.label}: its data directory could not be listed: {exc}") from exc
    side, kept, reached = _side(pc, node, files, cut_ns)
    rows: list[CutState] = []
    oldest: int | None = None
    for state, torn_file in states(files, kept[side], torn, pc.rng, reached):
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


def _kill_replicas(pc: PowerCut) -> None:
    """A power cut of the whole host: the replicas stop with the primary (SIGKILL), before any file is read."""
    for n in pc.nodes[1:]:
        if n.pid:
            with contextlib.suppress(OSError):
                os.kill(n.pid, signal.SIGKILL)


def _how(pc: PowerCut, binary: str, acked) -> str:
    ebpf_off = sorted({n.no_ebpf for n in pc.nodes if n.no_ebpf})
    return (f"a power cut {CUT_AT:.0%} into the launch's last SET window (each SET window's acknowledgments after "
            f"its own {CUT_AT:.0%} not kept; the states are built at the latest cut among the runs whose "
            f"acknowledgments were read); after the window the server killed (SIGKILL), its replicas with it (a "
            f"power cut of the whole host), and each file of its data directory cut to what its syncs had made durable "
            f"by the cut, loaded by a plain {os.path.basename(binary)}"
            + (f"; the kernel's record not used ({'; '.join(ebpf_off)}): the shim's" if ebpf_off else "")
            + ("; the replica readers' reads not compared (they are not cut at the power cut's moment)"
               if acked.seen.any() else ""))


def verify(pc: PowerCut, binary: str, acked) -> dict:
    """runs[].durability_check for a power cut of the whole host (module docstring): the primary's states, and
    each replica's at the same cut (its boundary's); acked: durability_check.AckedWrites. A node that fails
    (its files not listed, a state not loaded) adds its line to `error`; what the others measured stays."""
    _kill_replicas(pc)
    acked.collect()
    unread = acked.unread()
    out: dict = {"method": "power-cut", "how": _how(pc, binary, acked), "acked": 0, "acked_missing": 0,
                 "writes_acked": acked.writes, "examples": [], "runs": acked.parts()}
    errors = [unread, acked.uncut()]
    if acked.cut is None:
        errors.insert(0, "no open-loop SET window carried the cut (--workload write-only with --rate)")
        return {**out, "error": "; ".join(filter(None, errors))}
    cut_ns, cut_seq = acked.cut
    got: list[_NodeCut | None] = []
    for i, n in enumerate(pc.nodes):
        try:
            got.append(_cut_node(pc, n, binary, cut_ns, acked.latest, pc.torn and i == 0))
        except _Failed as exc:
            got.append(None)
            errors.append(str(exc))
    primary = got[0]
    if primary is not None:
        worst = max(primary.states, key=lambda r: r.acked_missing)
        out.update(acked=worst.acked, acked_missing=worst.acked_missing, examples=worst.examples,
                   states=[msgspec.to_builtins(r) for r in primary.states], files=primary.files,
                   boundary_from=primary.boundary_from, lost_window_ms=_window(cut_seq, primary.oldest))
    rows = [_replica_row(n, r, cut_seq) for n, r in zip(pc.nodes[1:], got[1:]) if r is not None]
    error = "; ".join(filter(None, errors))
    return {**out, **({"replicas": rows} if rows else {}), **({"error": error} if error else {})}


def _window(cut_seq: int, oldest: int | None) -> float:
    return round((cut_seq - oldest) / 1e6, 1) if oldest is not None else 0.0


def _replica_row(node: Node, got: _NodeCut, cut_seq: int) -> dict:
    """runs[].durability_check.replicas[]: a replica's state at the cut, checked against the clients' acks."""
    st = got.states[0]
    return {"port": node.port, "acked": st.acked, "acked_missing": st.acked_missing, "examples": st.examples,
            "kept": st.kept, "files": got.files, "boundary_from": got.boundary_from,
            "lost_window_ms": _window(cut_seq, got.oldest)}
