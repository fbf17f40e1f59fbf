"""AOF writes timed for a share of each second while observing an attached server (record --attach,
no workload of ours, the server in no replication): the rest of the time their programs are detached.

Why: timing an AOF write takes two of ext4's tracepoints (its first step and the write_end of its last
folio), each a BPF program run on the main thread's path; under `appendfsync always` they were about half
of the tracer's BPF time per request (check 31's scenario, docs/performance.md), where the fsyncs, which
explain most of what a client waits for, take the other half. An observing recording times every fsync
and a sample of the AOF writes: their distribution from the sample, their count, total time and bytes
estimated from it (analysis/server.py scales them by the share), and the share is in the window
(`probe.sampled`). A window that times client requests (write-only cells, replicas being merged) reads
every AOF write, so it is never sampled.

Detaching never cuts a write in two: the programs that begin one go first; those that end one stay until
no AOF write is in flight (or END_WAIT_S passed: a write blocked that long is timed when it ends, whenever
that is, as an unsampled one would be)."""
from __future__ import annotations

import threading
import time
from typing import Any

from valkeytrace.layout import CALL_NAMES
from valkeytrace.tracers import ebpf_pool

AOF_WRITE_DUTY = 0.25  # the share of each PERIOD_S the AOF-write programs are attached
PERIOD_S = 1.0
END_WAIT_S = 0.2
BEGINS = (b"ext4_da_write_begin", b"ext4_write_begin", b"ctime_ns_xchg", b"ext4_journal_start_inode")
ENDS = (b"ext4_da_write_end", b"ext4_write_end", b"ext4_journalled_write_end")
_AOF_WRITE = CALL_NAMES.index("aof_write")
_KIND_AT = 32  # probes/valkey_threads.bpf.c struct inflight_call: u64 start_ns, bytes, remaining, pos0; u32 kind


def aof_write_in_flight(bpf, slots) -> bool:
    """Whether a thread of these slots is inside an AOF write the probe began."""
    table = bpf[b"inflight"]
    for slot in slots:
        raw = table.raw(slot)
        if raw and int.from_bytes(raw[:8], "little") and int.from_bytes(raw[_KIND_AT:_KIND_AT + 4], "little") == _AOF_WRITE:
            return True
    return False


class WriteSampler:
    """Attaches and detaches the AOF-write programs of a loaded probe, duty of each PERIOD_S, on a thread
    of its own between start() and stop(); share() says how much of a stretch they were attached."""

    def __init__(self, bpf: Any, slot_tids, duty: float = AOF_WRITE_DUTY):
        """slot_tids(): {slot: tid} of the target's threads now (EbpfTracer.slot_tids)."""
        self.bpf, self.slot_tids, self.duty = bpf, slot_tids, duty
        attached = set(bpf.raw_tracepoint_fds)
        self.begins = [tp for tp in BEGINS if tp in attached]
        self.ends = [tp for tp in ENDS if tp in attached]
        self._spans: list[list[float]] = []  # [on, off] monotonic seconds; off 0.0 while on
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._spans = [[time.monotonic(), 0.0]]
        if not self.begins or not self.ends or self.duty >= 1.0:
            return  # nothing to sample: all attached throughout
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="valkeytrace-aof-sample", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        on_s = PERIOD_S * self.duty
        while not self._stop.wait(on_s):
            try:
                self._detach()
            except Exception:
                return  # the program is going away (stop, the server gone): the window says what was sampled
            if self._stop.wait(PERIOD_S - on_s):
                return
            self._attach()

    def _detach(self) -> None:
        for tp in self.begins:
            self.bpf.detach_raw_tracepoint(tp=tp)
        self._spans[-1][1] = time.monotonic()
        deadline = time.monotonic() + END_WAIT_S
        while aof_write_in_flight(self.bpf, self.slot_tids()) and time.monotonic() < deadline:
            time.sleep(0.002)
        for tp in self.ends:
            self.bpf.detach_raw_tracepoint(tp=tp)

    def _attach(self) -> None:
        # its ends first: no write begins that nothing would end
        ebpf_pool.attach(self.bpf, [], [tp for tp in self.ends + self.begins if tp not in self.bpf.raw_tracepoint_fds])
        self._spans.append([time.monotonic(), 0.0])

    def stop(self) -> None:
        """Everything attached again (a parked or paused program is detached and attached as a whole), also
        after a detach that failed half way (the server gone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if any(tp not in self.bpf.raw_tracepoint_fds for tp in self.ends + self.begins):
            self._attach()

    def share(self, t0: float, t1: float) -> float:
        """The share of [t0, t1] (monotonic seconds) the programs were attached: 1.0 when nothing was sampled."""
        if t1 <= t0 or len(self._spans) == 1 and not self._spans[0][1]:
            return 1.0
        on = sum(max(0.0, min(off or t1, t1) - max(on, t0)) for on, off in self._spans)
        return min(1.0, on / (t1 - t0))
