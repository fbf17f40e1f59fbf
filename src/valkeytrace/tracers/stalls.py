"""The injected disk stalls as they happened (--inject-fsync-delay ...,stall:S/P): the shared log the shim
writes (csrc/stall_log.h: each stall's CLOCK_MONOTONIC start and end), made here, read by the recorder
(each window's stalls, runs[].memory.stalls) and mapped by the open-loop client (its latencies split by
whether a request was due during a stall)."""
from __future__ import annotations

import mmap
import os

import numpy as np

MAGIC, MAX = 0x4C535456, 256
ENTRY = np.dtype([("start_ns", "<u8"), ("end_ns", "<u8")])
LOG_DTYPE = np.dtype([("magic", "<u4"), ("pad", "<u4"), ("n", "<u8"), ("e", ENTRY, (MAX,))])


class StallLog:
    """The file ($VALKEYTRACE_STALL_LOG), 0600 and exclusive in /dev/shm, removed on close."""

    def __init__(self):
        from valkeytrace.tracers.region import make_shared

        self.path, self.mm = make_shared("valkeytrace-stalls", LOG_DTYPE.itemsize)
        self.log = np.frombuffer(self.mm, dtype=LOG_DTYPE, count=1)

    def chown(self, uid: int, gid: int) -> None:
        os.chown(self.path, uid, gid)

    def env(self) -> dict:
        return {"VALKEYTRACE_STALL_LOG": self.path}

    def between(self, t0_s: float, t1_s: float) -> list[list[float | None]]:
        """The stalls that overlap [t0_s, t1_s] (time.monotonic seconds), as [start, end] seconds from t0_s
        (end None: still going at t1_s)."""
        return intervals(self.log[0].copy(), t0_s, t1_s)

    def close(self) -> None:
        from valkeytrace.tracers.region import close_shared

        del self.log
        close_shared(self.mm, self.path)


def intervals(log, t0_s: float, t1_s: float) -> list[list[float | None]]:
    """[start, end] seconds from t0_s of the log's stalls overlapping [t0_s, t1_s], in order."""
    if int(log["magic"]) != MAGIC:
        return []
    n, out = int(log["n"]), []
    for i in range(max(0, n - MAX), n):
        e = log["e"][i % MAX]
        s, end = int(e["start_ns"]) / 1e9, int(e["end_ns"]) / 1e9
        if not s or s > t1_s or (end and end < t0_s):
            continue
        out.append([round(s - t0_s, 4), round(end - t0_s, 4) if end else None])
    return out


def map_readonly(path: str):
    """The read-only mapping of a log made by another process (the open-loop client's), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        mm = mmap.mmap(fd, LOG_DTYPE.itemsize, mmap.MAP_SHARED, mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return mm
