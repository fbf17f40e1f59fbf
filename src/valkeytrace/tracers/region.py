"""The shim's shared-memory region (csrc/shim_region.c): created 0600 and exclusive in /dev/shm,
mapped by the preloaded shim in the server and read here through the _native module (every read
bounds-checked in C)."""
from __future__ import annotations

import mmap
import os
import secrets
from dataclasses import dataclass

import numpy as np

from valkeytrace._native import ffi, lib
from valkeytrace.errors import VTError
from valkeytrace.layout import CALL_NAMES, HIST_BUCKETS

SHM_DIR = "/dev/shm"
RECORDED_KINDS = ("fdatasync", "fsync", "aof_write", "socket_write", "epoll_wait", "loop_iteration")



@dataclass
class SlotReading:
    """One thread's slot of the shim's region at a moment."""
    name: str
    kinds: dict          # kind -> (dense bucket counts, sum_ns, max_ns)
    bytes: dict          # kind -> bytes
    injected_ns: int = 0

class ShimRegion:
    """The shared-memory file: created 0600 and exclusive, read through _native, removed on close."""

    def __init__(self, inject_delay_ns: int = 0):
        self.size = lib.vt_shim_region_size()
        self.path, self.mm = make_shared("valkeytrace", self.size)
        self.base = ffi.from_buffer(self.mm)
        if lib.vt_shim_region_init(self.base, self.size, inject_delay_ns) != 0:
            raise VTError("cannot initialise the shim's shared memory")
        self.header = ffi.cast("struct vt_shim_header *", self.base)
        self._slot = ffi.new("struct vt_shim_thread *")

    def chown(self, uid: int, gid: int):
        os.chown(self.path, uid, gid)

    def set_paused(self, paused: bool):
        self.header.paused = 1 if paused else 0

    def set_extra_delay(self, ns: int):
        """Add ns to every fsync/fdatasync from now on (the shim reads it on every call)."""
        self.header.extra_delay_ns = int(ns)

    def set_untimed(self, kinds):
        """Pass these call kinds through untimed (the shim reads the mask on every call)."""
        self.header.untimed = sum(1 << CALL_NAMES.index(k) for k in kinds)

    @property
    def untimed(self) -> list[str]:
        mask = int(self.header.untimed)
        return [kind for i, kind in enumerate(CALL_NAMES) if mask >> i & 1]

    @property
    def mapped_pid(self) -> int:
        return int(self.header.pid)

    @property
    def dropped_calls(self) -> int:
        return int(self.header.dropped_calls)

    def snapshot(self) -> dict[int, SlotReading]:
        """{tid: its slot now}"""
        n = lib.vt_shim_readable_slots(self.base, self.size)
        if n < 0:
            raise VTError("the shim's shared memory is corrupt (bad header)")
        out = {}
        for i in range(n):
            if lib.vt_shim_copy_slot(self.base, self.size, i, self._slot) != 0:
                continue
            s = self._slot
            kinds = {}
            for kind in RECORDED_KINDS:
                k = CALL_NAMES.index(kind)
                h = s.hist[k]
                if h.count:
                    counts = np.frombuffer(ffi.buffer(h.buckets), dtype=np.uint64, count=HIST_BUCKETS).copy()
                    kinds[kind] = (counts, int(h.sum_ns), int(h.max_ns))
            out[int(s.tid)] = SlotReading(ffi.string(s.name).decode("utf-8", "replace"), kinds,
                                          {kind: int(s.bytes[CALL_NAMES.index(kind)]) for kind in RECORDED_KINDS},
                                          int(s.injected_ns))
        return out

    def close(self):
        self.base = self.header = None
        close_shared(self.mm, self.path)


def make_shared(prefix: str, size: int) -> tuple[str, mmap.mmap]:
    """(path, mapping) of a new file shared with the server: in /dev/shm, 0600 and exclusive (its name
    prefix-PID-random), size bytes of zeros, mapped read-write; nothing left behind when it fails."""
    path = os.path.join(SHM_DIR, f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        return path, mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def close_shared(mm: mmap.mmap, path: str) -> None:
    """Unmap a file shared with the server and remove it (a view still alive keeps the mapping)."""
    try:
        mm.close()
    except (BufferError, ValueError):
        pass
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
