"""The kernel's record of what each sync made durable (record --verify-durability power-cut, any backend
that loads eBPF): probes/vt_durable.bpf.c, tracepoints only, loaded for one server (and the children it
forks) through the compiling child (tracers/bcc_load.py). Its records have the shim's layout
(csrc/shim_durable.h); workload/boundary.py replays them."""
from __future__ import annotations

import numpy as np

from valkeytrace.tracers import bcc_load

CAPACITY = 1 << 18  # records kept (16 MB of kernel memory): ~40 s of fdatasyncs at 3,000/s; the rest counted


class DurableProbe:
    """The probe attached for `pid` (its tracepoints attach as it loads); events() reads what it kept."""

    def __init__(self, pid: int, capacity: int = CAPACITY):
        self.capacity = capacity
        self.program = bcc_load.compile_probe("vt_durable", TARGET_TGID=pid, DUR_CAPACITY=capacity)

    def events(self, dtype: np.dtype) -> tuple[np.ndarray, int]:
        """(the records in the order they were taken, how many were taken past the capacity)."""
        taken = self.program[b"durlog"], self.program[b"durnext"].value(0)
        log, n = taken
        kept = min(n, self.capacity)
        raw = b"".join(log.raw(i) or bytes(dtype.itemsize) for i in range(kept))
        return np.frombuffer(raw, dtype=dtype).copy(), max(0, n - self.capacity)

    def close(self) -> None:
        self.program.cleanup()
