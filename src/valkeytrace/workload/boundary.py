"""The durable boundary of each file, replayed from a trace of the server's syncs (record
--verify-durability power-cut; docs/explain.md §9).

Both backends log the same records (csrc/shim_durable.h): the shim from its fsync/fdatasync wrappers
(csrc/shim_durable.c, no privileges), the kernel from ext4's tracepoints (probes/vt_durable.bpf.c). A sync
that was entered and returned success before the cut made durable what its file held as it was entered (the
writes completed by then: a write under way on another thread at that instant may count). A file's name
survives the cut when it was there as the trace began, or when an fsync of its directory was entered after
the create or rename that made it and returned before the cut.

Left out (a power cut can keep more, never less, except the last): the kernel's own writeback of dirty pages
(data no sync covered that reached the disk anyway), a rename or unlink not yet synced (the old name's file
is not rebuilt: the name is absent), and any reordering or loss below the file system (a disk's volatile
cache that ignores flushes).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

EVENT = np.dtype([("ns", "<u8"), ("ino", "<u8"), ("value", "<u8"), ("kind", "<u4"), ("tid", "<u4"), ("name", "S32")])
HEADER_BYTES = 64
LOG_MAGIC = 0x31676F6C72756476  # "vdurlog1", csrc/shim_durable.h
SHIM_CAPACITY = 1 << 20
SYNC_BEGIN, SYNC_END, CREATE, RENAME = 1, 2, 3, 4


@dataclass(frozen=True)
class FileEntry:
    """A file of the data directory as the server left it: its path relative to the data directory."""
    name: str
    ino: int
    dir_ino: int
    size: int


@dataclass
class Trace:
    """One backend's records, and what was taken as durable when they began (inode -> bytes)."""
    events: np.ndarray
    baseline: dict[int, int] = field(default_factory=dict)
    dropped: int = 0


def new_shim_log(path: str, capacity: int = SHIM_CAPACITY) -> None:
    """The file the shim maps ($VALKEYTRACE_DURABLE_LOG): its header, its records' room (sparse)."""
    with open(path, "wb") as f:
        f.write(np.array([LOG_MAGIC, capacity, 0, 0, 0, 0, 0, 0], dtype="<u8").tobytes())
        f.truncate(HEADER_BYTES + capacity * EVENT.itemsize)


def read_shim_log(path: str) -> tuple[np.ndarray, int] | None:
    """(the records the shim took, how many it could not keep); None when no shim mapped the log."""
    head = np.fromfile(path, dtype="<u8", count=HEADER_BYTES // 8)
    if head.size < 4 or int(head[0]) != LOG_MAGIC or not int(head[3]):
        return None
    capacity, taken = int(head[1]), int(head[2])
    kept = min(capacity, taken)
    events = np.fromfile(path, dtype=EVENT, count=kept, offset=HEADER_BYTES).view(np.recarray)
    return events[events.ns != 0], max(0, taken - capacity)  # a record taken as the process died: left out


def listing(data_dir: str, subdirs: tuple[str, ...]) -> list[FileEntry]:
    """The regular files of data_dir and of its subdirs (the AOF directory), as they are now."""
    out = []
    for sub in ("",) + subdirs:
        d = os.path.join(data_dir, sub)
        if not os.path.isdir(d):
            continue
        dino = os.stat(d).st_ino
        for name in sorted(os.listdir(d)):
            st = os.stat(os.path.join(d, name), follow_symlinks=False)
            if os.path.isfile(os.path.join(d, name)) and not os.path.islink(os.path.join(d, name)):
                out.append(FileEntry(os.path.join(sub, name) if sub else name, st.st_ino, dino, st.st_size))
    return out


def baseline(files: list[FileEntry]) -> dict[int, int]:
    """What a trace that begins now takes as durable: every file as it stands (it cannot see earlier syncs)."""
    return {f.ino: f.size for f in files}


@dataclass
class Replay:
    """A trace replayed to a moment: each inode's durable bytes, the largest size a sync saw it at (what it had
    reached by then, as far as the log tells), the entry times of each inode's successful syncs, and when each
    inode was created and each name renamed into place."""
    durable: dict[int, int]
    reached: dict[int, int] = field(default_factory=dict)
    synced: dict[int, list[int]] = field(default_factory=dict)
    created: dict[int, int] = field(default_factory=dict)
    renamed: dict[bytes, int] = field(default_factory=dict)


def replay(trace: Trace, cut_ns: int) -> Replay:
    """The trace's records up to cut_ns. A CREATE starts its inode afresh: an inode number is reused once its file
    is deleted (an AOF rewrite drops the old incr file, the new one may take its number), so nothing synced
    before it, nor the baseline, counts for the new file."""
    events = trace.events.view(np.recarray)
    ev = events[events.ns <= cut_ns]
    ev = ev[np.argsort(ev.ns, kind="stable")]
    r = Replay(dict(trace.baseline), dict(trace.baseline))
    open_syncs: dict[int, tuple[int, int, int]] = {}  # tid -> (inode, size, entered)
    for ns, ino, value, kind, tid, name in zip(ev.ns.tolist(), ev.ino.tolist(), ev.value.tolist(),
                                               ev.kind.tolist(), ev.tid.tolist(), ev.name.tolist()):
        if kind == SYNC_BEGIN:
            open_syncs[tid] = (ino, value, ns)
            r.reached[ino] = max(r.reached.get(ino, 0), value)
        elif kind == SYNC_END:
            began = open_syncs.pop(tid, None)
            if began is not None and began[0] == ino and value:
                r.durable[ino] = max(r.durable.get(ino, 0), began[1])
                r.synced.setdefault(ino, []).append(began[2])
        elif kind == CREATE:
            r.created[ino] = ns
            r.durable.pop(ino, None)
            r.reached.pop(ino, None)
            r.synced.pop(ino, None)
            open_syncs = {t: s for t, s in open_syncs.items() if s[0] != ino}
        elif kind == RENAME:
            r.renamed[name.rsplit(b"/", 1)[-1]] = ns  # the path's last 31 bytes: its last component's
    return r


def boundaries(trace: Trace, files: list[FileEntry], cut_ns: int) -> dict[str, int | None]:
    """Each file's durable bytes at cut_ns (None: its name would not survive), from the trace's records."""
    return kept_at(replay(trace, cut_ns), files)


def kept_at(r: Replay, files: list[FileEntry]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for f in files:
        made = max(r.created.get(f.ino, -1), r.renamed.get(os.path.basename(f.name).encode()[-31:], -1))
        present = made < 0 or any(t >= made for t in r.synced.get(f.dir_ino, ()))
        out[f.name] = min(r.durable.get(f.ino, 0), f.size) if present else None
    return out


def reached_at(r: Replay, files: list[FileEntry]) -> dict[str, int]:
    """Each file's largest size the log saw by the cut (its syncs' entries; the baseline's): a torn state cuts no
    further, the bytes written after the cut were not there."""
    return {f.name: min(f.size, r.reached.get(f.ino, 0)) for f in files}
