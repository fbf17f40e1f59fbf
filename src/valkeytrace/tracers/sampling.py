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

import numpy as np

from valkeytrace.layout import BLOCK_EVENT_DTYPE, CALL_NAMES, EVENT_CALL
from valkeytrace.tracers import ebpf_pool

AOF_WRITE_DUTY = 0.25  # the share of each PERIOD_S the AOF-write programs are attached
PERIOD_S = 1.0
END_WAIT_S = 0.2
BEGINS = (b"ext4_da_write_begin", b"ext4_write_begin", b"ctime_ns_xchg", b"ext4_journal_start_inode")
ENDS = (b"ext4_da_write_end", b"ext4_write_end", b"ext4_journalled_write_end")
_AOF_WRITE = CALL_NAMES.index("aof_write")
_SYNCS = [CALL_NAMES.index("fdatasync"), CALL_NAMES.index("fsync")]
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
                if self._stop.wait(PERIOD_S - on_s):
                    return
                self._attach()
            except Exception:
                return  # the program is going away (stop, the server gone): the spans say what was sampled

    def _detach(self) -> None:
        try:
            for tp in self.begins:
                self.bpf.detach_raw_tracepoint(tp=tp)
        finally:  # closed once no write can begin, or once one begin is gone (a detach that failed half way)
            if self._spans[-1][1] == 0.0 and any(tp not in self.bpf.raw_tracepoint_fds for tp in self.begins):
                self._spans[-1][1] = time.monotonic()
        deadline = time.monotonic() + END_WAIT_S
        while aof_write_in_flight(self.bpf, self.slot_tids()) and time.monotonic() < deadline:
            time.sleep(0.002)
        for tp in self.ends:
            self.bpf.detach_raw_tracepoint(tp=tp)

    def _attach(self) -> None:
        try:  # its ends first: no write begins that nothing would end
            ebpf_pool.attach(self.bpf, [], [tp for tp in self.ends + self.begins if tp not in self.bpf.raw_tracepoint_fds])
        finally:  # opened once a write can begin (an attach that failed half way included)
            if self._spans[-1][1] != 0.0 and any(tp in self.bpf.raw_tracepoint_fds for tp in self.begins):
                self._spans.append([time.monotonic(), 0.0])

    def stop(self) -> None:
        """Everything attached again (a parked or paused program is detached and attached as a whole), also
        after a detach that failed half way (the server gone); a program that cannot be attached again (it is
        being unloaded) is left as it is, its spans closed where its begins went."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if any(tp not in self.bpf.raw_tracepoint_fds for tp in self.ends + self.begins):
            try:
                self._attach()
            except Exception:
                pass

    def share(self, t0: float, t1: float) -> float:
        """The share of [t0, t1] (monotonic seconds) the programs were attached: 1.0 when nothing was sampled."""
        if t1 <= t0 or len(self._spans) == 1 and not self._spans[0][1]:
            return 1.0
        on = sum(max(0.0, min(off or t1, t1) - max(on, t0)) for on, off in self._spans)
        return min(1.0, on / (t1 - t0))

    def sampled(self, a, b, records: bytes, tid: int) -> dict:
        """The window's probe fields for its sample (none when every write was timed): `sampled`, the share of
        the window's AOF writes the sample holds, and `sampled_rse`, the relative standard error of the count
        estimated from it (absent when one span cannot tell). a, b: the window's edge readings
        (ebpf_window.Snapshot); records: its call records (ebpf_events); tid: the thread that writes the AOF."""
        t0, t1 = a.mono_ns / 1e9, b.mono_ns / 1e9
        if self.share(t0, t1) >= 1.0:
            return {}
        ev = np.frombuffer(records[:len(records) - len(records) % BLOCK_EVENT_DTYPE.itemsize],
                           dtype=BLOCK_EVENT_DTYPE).view(np.recarray)
        ev = ev[(ev.state == EVENT_CALL) & (ev.tid == tid)]
        at = ev.start_ns / 1e9
        writes, syncs = at[ev.cause == _AOF_WRITE], at[np.isin(ev.cause, _SYNCS)]
        spans = [(max(on, t0), min(off or t1, t1)) for on, off in self._spans]
        share, rse = estimate(spans, t0, t1, writes, syncs, unrecorded(a, b, tid, _SYNCS))
        sample = int(((writes >= t0) & (writes < t1)).sum())
        if sample:  # the report scales the kernel's count, which holds the writes a full call log had no room for
            share = min(1.0, share * (sample + unrecorded(a, b, tid, [_AOF_WRITE])) / sample)
        return {"sampled": {"aof_write": round(share, 4)}, **({"sampled_rse": {"aof_write": round(rse, 4)}}
                                                              if rse is not None else {})}


def unrecorded(a, b, tid: int, kinds) -> int:
    """The calls of these kinds tid made between readings a and b that left no record (the kernel's histogram
    counts only those: a call log that was full, probes/valkey_threads.bpf.c end_call_of)."""
    n = 0
    for slot, t in b.threads.items():
        was = a.threads.get(slot)
        if int(t.tid) == tid:
            n += sum(int(t.hist[k].buckets.sum()) - (int(was.hist[k].buckets.sum()) if was is not None
                                                     and int(was.tid) == tid else 0) for k in kinds)
    return max(n, 0)


def estimate(spans, t0: float, t1: float, writes, syncs, unrecorded_syncs: int = 0) -> tuple[float, float | None]:
    """(share, rse) of a sample taken in spans [(on, off)] of the window [t0, t1] (seconds): the share of the
    window's AOF writes the spans hold, and the relative standard error of the count estimated as the sample's
    over that share. writes, syncs: the start times of the AOF writes timed and of the writing thread's fsyncs
    (their records); unrecorded_syncs: its fsyncs in the window that left no record.

    The load's rate is not steady: under CPU contention the main thread's iterations come in bursts (3 to 59
    fdatasyncs per 125 ms beside three busy loops), so the share of the time the spans cover (two quarter
    seconds of a 2 s window) held 0.43-0.58 of the writes it claimed where every one was timed in them (the
    writes timed in a span were its fdatasyncs, one for one). So the share is measured by what is timed all
    the time: the writing thread's fsyncs (appendfsync always: one after each AOF write), the share of them
    that fell in the spans; without them (everysec, no), the share of the time. Either is a ratio estimator
    (per span i: y_i writes, x_i fsyncs or seconds; X the window's), its variance from the spans' residuals:
    (X / sum x)^2 (1 - f) n / (n - 1) sum (y_i - R x_i)^2, R = sum y / sum x, f the time share; a share of
    the time is at least as uncertain as counts arriving at random (the sample's count, Poisson), a share of the
    fsyncs as a write split from its fsync by a span's edge (half a write each way per span), and as the spans'
    writes differ from their fsyncs."""
    spans = [(on, off) for on, off in spans if off > on]
    y = np.array([((writes >= on) & (writes < off)).sum() for on, off in spans], dtype=float)
    time_x = np.array([off - on for on, off in spans])
    sync_x = np.array([((syncs >= on) & (syncs < off)).sum() for on, off in spans], dtype=float)
    f = min(1.0, time_x.sum() / (t1 - t0)) if t1 > t0 else 1.0
    total_syncs = float(((syncs >= t0) & (syncs < t1)).sum()) + unrecorded_syncs
    by_syncs = sync_x.sum() > 0 and 2 * sync_x.sum() >= y.sum()
    x, big_x = (sync_x, total_syncs) if by_syncs else (time_x, t1 - t0)
    if not spans or not x.sum() or not y.sum():
        return f, None
    share = min(1.0, x.sum() / big_x)
    n, r = len(spans), y.sum() / x.sum()
    var = (1 - f) * n / (n - 1) * float(((y - r * x) ** 2).sum()) if n > 1 else None
    if not by_syncs:
        var = max(var or 0.0, (1 - f) * y.sum())
    elif var is not None:  # a span's edge can split a write from its fsync: half a write each way, at least; and
        # the spans' writes over their fsyncs stand for the window's only as far as the two go one for one (1.06 in
        # the suite's first phase: 516 estimated for 488 fdatasyncs at a stated 0.6%): their difference, at least
        var = max(var, n / 4, float(y.sum() - x.sum()) ** 2)
    return share, None if var is None else float(np.sqrt(var) / y.sum())
