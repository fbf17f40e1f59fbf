"""The probe's records, taken into one native sink (csrc/events.c): the ring buffer's (a main thread's long
blocks, client requests) through a C callback, and every CPU's call log's (each fsync and AOF write) read in
place from the mmapped array (probes/vt_calllog.bpf.h). No Python object per record or per drain: the
records stay in the sink until a window's edge takes them."""
from __future__ import annotations

import mmap
import threading
from typing import Any

from valkeytrace._native import ffi, lib
from valkeytrace.layout import BLOCK_EVENT_DTYPE

SINK_MAX_BYTES = 512 << 20  # a window's records held at most (~16M records): past it they are counted, not kept
LOG_HEADER = 128  # struct vt_call_log_head (csrc/valkeytrace.h)


class CallLogs:
    """The call_logs array mapped into this process: per CPU, LOG_HEADER bytes then 2^bits records."""

    def __init__(self, table, cpus: int, bits: int):
        self.cpus, self.size = cpus, 1 << bits
        self.stride = LOG_HEADER + self.size * BLOCK_EVENT_DTYPE.itemsize  # elements of 32 bytes, back to back
        if table.value_size != BLOCK_EVENT_DTYPE.itemsize or table.max_entries * table.value_size != cpus * self.stride:
            raise ValueError(f"call_logs: {table.max_entries} x {table.value_size} B is not {cpus} logs of {self.size}")
        length = -(-self.stride * self.cpus // mmap.PAGESIZE) * mmap.PAGESIZE
        self._map = mmap.mmap(table.map_fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._base = ffi.from_buffer("uint8_t[]", self._map)

    def take(self, sink, keep: bool = True) -> int:
        return int(lib.vt_call_logs_take(sink, self._base, self.stride, self.cpus, self.size, int(keep)))

    def close(self) -> None:
        ffi.release(self._base)
        self._map.close()


class Events:
    """A loaded program's record sources and the sink they fill; one lock serialises every take (libbpf's
    ring_buffer__consume is not re-entrant)."""

    def __init__(self, bpf, defines: dict):
        self.lock = threading.Lock()
        self.sink: Any = ffi.new("struct vt_event_sink *", {"record_size": BLOCK_EVENT_DTYPE.itemsize,
                                                            "max_bytes": SINK_MAX_BYTES})
        bpf.open_ring_buffer(b"block_events", int(ffi.cast("uintptr_t", ffi.addressof(lib, "vt_event_sink_collect"))),
                             int(ffi.cast("uintptr_t", self.sink)))
        self.logs = (CallLogs(bpf[b"call_logs"], defines["CALL_LOG_CPUS"], defines["CALL_LOG_BITS"])
                     if b"call_logs" in getattr(bpf, "tables", {}) else None)

    @property
    def records(self) -> int:
        """Records taken into the sink since it was made."""
        return int(self.sink.records)

    def consume(self, bpf, take: bool = False) -> bytes:
        """Every source drained into the sink; take: the sink's records, emptied."""
        with self.lock:
            bpf.ring_buffer_consume()
            if self.logs is not None:
                self.logs.take(self.sink)
            if not take or not self.sink.len:
                return b""
            blob, self.sink.len = ffi.buffer(self.sink.buf, self.sink.len)[:], 0  # copied first, then emptied
            return blob

    def discard(self, bpf) -> None:
        """Whatever the sources hold, dropped (a program parked or taken over)."""
        with self.lock:
            bpf.ring_buffer_consume()
            if self.logs is not None:
                self.logs.take(self.sink, keep=False)
            self.sink.len = 0

    def free(self) -> None:
        """The mapping and the sink's buffer let go (the program is being unloaded; the caller holds no take)."""
        if self.logs is not None:
            self.logs.close()
            self.logs = None
        lib.vt_event_sink_free(self.sink)
