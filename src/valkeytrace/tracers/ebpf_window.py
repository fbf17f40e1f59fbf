"""The eBPF backend's window arithmetic: pure functions over raw map readings (no bcc, no root),
unit-tested on made-up readings (tests/unit/test_ebpf_window.py).

A reading (Snapshot) holds, per slot, the thread record (layout.SHIM_THREAD_DTYPE: cumulative
call histograms and its owner's tid), the off-CPU totals by (cause, state) with their owner's tid,
and the interval still open at the reading, counted up to it. A window is the difference of two
readings; a slot whose owner changed between them counts from zero (the probe resets a slot's
totals when another thread takes it, tracers/ebpf.py).

Slots: a thread whose tid - pid is below MAX_SLOTS owns that slot directly; any other gets one of
the EXTRA_SLOTS past them (assign_extra_slots), so two threads never write one slot.
"""
from __future__ import annotations

import msgspec
import numpy as np

from valkeytrace._native import lib
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.layout import (BLOCK_EVENT_DTYPE, CALL_NAMES, EVENT_ARRIVE, EVENT_CALL, EVENT_STATE_NAMES,
                                HIST_BUCKETS, STATE_NAMES)
from valkeytrace.recording import document
from valkeytrace.roles import thread_role
from valkeytrace.server import threads as thr
from valkeytrace.tracers.windows import histogram_delta

MAX_SLOTS = lib.VT_SHIM_MAX_THREADS  # direct slots (probes/valkey_threads.bpf.c MAX_SLOTS)
EXTRA_SLOTS = 16  # EXTRA_SLOTS there
ALL_SLOTS = MAX_SLOTS + EXTRA_SLOTS
RECORDED_CALLS = [CALL_NAMES.index(k) for k in ("fdatasync", "fsync", "aof_write")]  # a record each (the probe)
OFFCPU_DTYPE = np.dtype([("tid", "<u8"), ("ns", "<u8", (len(CALL_NAMES), len(STATE_NAMES))), ("charged_ns", "<u8")])
SINCE_DTYPE = np.dtype([("start_ns", "<u8"), ("tid", "<u4"), ("cause", "<u2"), ("state", "<u2")])


class Snapshot:
    """The per-slot arrays at one instant (mono_ns, CLOCK_MONOTONIC like bpf_ktime_get_ns):
    threads {slot: SHIM_THREAD_DTYPE record}, offcpu {slot: (owner tid, ns[cause, state])} with
    the open interval counted up to mono_ns, lost events, and the threads' schedstat readings."""

    __slots__ = ("mono_ns", "threads", "offcpu", "lost", "sched")

    def __init__(self, mono_ns: int, threads: dict, offcpu: dict, lost: int, sched: dict):
        self.mono_ns, self.offcpu, self.lost, self.sched = mono_ns, offcpu, lost, sched
        self.threads = {slot: _record(t) for slot, t in threads.items()}


def _record(t) -> np.record:
    """A thread record (SHIM_THREAD_DTYPE) with its fields by attribute."""
    return t if isinstance(t, np.record) else np.asarray(t).reshape(1).view(np.recarray)[0]


def offcpu_reading(raw_offcpu: bytes, raw_since: bytes, mono_ns: int) -> tuple[int, np.ndarray, int]:
    """(owner tid, ns[cause, state], charged ns) of one slot, the interval still open counted up
    to mono_ns (when it is the owner's); charged: the wait for a CPU the kernel charged as on-CPU
    time, moved there by the probe (align_run in the probe)."""
    o = np.frombuffer(raw_offcpu, dtype=OFFCPU_DTYPE).view(np.recarray)[0]
    owner, off, charged = int(o.tid), o.ns.astype(np.uint64).copy(), int(o.charged_ns)
    since = np.frombuffer(raw_since, dtype=SINCE_DTYPE).view(np.recarray)[0]
    start = int(since.start_ns)
    if start and mono_ns > start and since.cause < len(CALL_NAMES) and since.state < len(STATE_NAMES):
        if owner != int(since.tid):  # its first interval: the probe resets the totals when it closes
            owner, off, charged = int(since.tid), np.zeros_like(off), 0
        off[since.cause, since.state] += np.uint64(mono_ns - start)
    return owner, off, charged


def assign_extra_slots(live, pid: int, extra: dict[int, int]) -> tuple[dict[int, int], set[int]]:
    """{tid: slot} for the live threads outside the direct range, keeping those already given and
    freeing the slots of threads gone; and the tids left without one (all EXTRA_SLOTS taken)."""
    live = set(live)
    keep = {tid: s for tid, s in extra.items() if tid in live}
    free = [s for s in range(MAX_SLOTS, ALL_SLOTS) if s not in keep.values()]
    untracked = set()
    for tid in sorted(live):
        if 0 <= tid - pid < MAX_SLOTS or tid in keep:
            continue
        if free:
            keep[tid] = free.pop(0)
        else:
            untracked.add(tid)
    return keep, untracked


def slot_tids(names, pid: int, extra: dict[int, int]) -> dict[int, int]:
    """{slot: tid} of every thread seen (names: {tid: comm})."""
    out = {tid - pid: tid for tid in names if 0 <= tid - pid < MAX_SLOTS}
    out.update({slot: tid for tid, slot in extra.items()})
    return out


def window_metrics(a: Snapshot, b: Snapshot, pid: int, names: dict, slots: dict, events: list[bytes],
                   info: dict) -> dict:
    """The recording's `server` dict for one window: raw per-thread data, nothing derived."""
    threads: dict[int, dict] = {}
    blob = b"".join(events)
    arr = np.frombuffer(blob, dtype=BLOCK_EVENT_DTYPE).view(np.recarray) if blob else None
    recorded = call_records(arr, a.mono_ns, b.mono_ns) if arr is not None else {}
    for slot, tid in slots.items():
        if slot not in b.threads:
            continue
        name = names.get(tid, "?")
        entry = document.thread_record(tid, name, thread_role(tid, pid, name))
        sched = thr.sched_delta(a.sched, b.sched, tid)
        if sched:
            entry["sched"] = sched  # the kernel's own on-CPU / run-queue time, beside the probes'
        tb, ta = b.threads[slot], a.threads.get(slot)
        mine = int(tb.tid) in (0, tid)  # else the slot's calls are another thread's (it took the slot after this one)
        if mine and ta is not None and ta.tid != tb.tid:
            ta = None  # the slot changed hands within the window: its totals restarted from zero
        for kind, call in enumerate(CALL_NAMES):
            rec = _calls(tb, ta, kind, mine, recorded.get((tid, kind)))
            if rec is not None:
                entry["calls"][call] = rec
        owner_b, off_b, charged_b = b.offcpu.get(slot, (0, None, 0))
        owner_a, off_a, charged_a = a.offcpu.get(slot, (0, None, 0))
        if off_b is not None and owner_b == tid:
            same = off_a is not None and owner_a == tid
            off = off_b.astype(np.int64) - (off_a.astype(np.int64) if same else 0)
            for cause, state in zip(*np.nonzero(off > 0)):
                entry["off_cpu_ns"].setdefault(CALL_NAMES[cause], {})[STATE_NAMES[state]] = int(off[cause, state])
            charged = charged_b - (charged_a if same else 0)
            if charged > 0:
                entry["charged_on_cpu_ns"] = charged
        threads[tid] = entry
    timeline, requests = _timeline(arr, a.mono_ns, b.mono_ns) if arr is not None else (b"[]", None)
    del arr
    out = document.server_window(
        backend="ebpf", window_ns=b.mono_ns - a.mono_ns, pid=pid, threads=list(threads.values()),
        lost_events=int(b.lost - a.lost),
        # the rows as the JSON they are written as (msgspec.Raw): ~35 bytes a row held until the recording
        # is written, not ~170 of Python lists (tens of thousands of rows a window under load)
        blocked_timeline={"threshold_ns": info.get("block_threshold_ns"),
                          "columns": ["start_offset_ns", "duration_ns", "tid", "cause", "state"],
                          "events": msgspec.Raw(timeline)},
        probe={k: v for k, v in info.items() if k != "defines"}, hist_buckets=HIST_BUCKETS,
        start_mono_ns=int(a.mono_ns))
    if requests is not None:
        out["requests"] = requests
    return out


def _timeline(arr: np.recarray, begin_ns: int, end_ns: int) -> tuple[bytes, dict | None]:
    """The window's blocked-timeline rows as JSON, in end order as they were written (the calls come from
    per-CPU logs, the blocks from the ring buffer), and its client requests' columns (None without)."""
    is_req = arr.state >= EVENT_ARRIVE
    reqs = arr[is_req]
    # one copy of the window's intervals, not two (tens of thousands of records under load: the
    # tracer's peak RSS is at this moment of each window)
    rows = arr[~is_req & (arr.start_ns + arr.duration_ns > begin_ns) & (arr.start_ns < end_ns)]
    timeline = timeline_json(rows[np.argsort(rows.start_ns + rows.duration_ns, kind="stable")], begin_ns)
    del rows
    reqs = reqs[(reqs.start_ns >= begin_ns) & (reqs.start_ns < end_ns)]
    return timeline, request_columns(reqs, begin_ns) if len(reqs) else None


def call_records(ev: np.recarray, begin_ns: int, end_ns: int) -> dict:
    """{(tid, call kind): (durations, bytes)} of the fsync and AOF-write records that ended in [begin_ns,
    end_ns): the calls the kernel's histogram no longer counts (probes/valkey_threads.bpf.c end_call_of)."""
    end = ev.start_ns + ev.duration_ns
    keep = (ev.state == EVENT_CALL) & np.isin(ev.cause, RECORDED_CALLS) & (end >= begin_ns) & (end < end_ns)
    ev = ev[keep]
    out = {}
    for tid, kind in set(zip(ev.tid.tolist(), ev.cause.tolist())):
        mine = (ev.tid == tid) & (ev.cause == kind)
        out[(tid, kind)] = (ev.duration_ns[mine].astype(np.uint64), int(ev.bytes[mine].sum()))
    return out


def _calls(tb, ta, kind: int, mine: bool, records) -> dict | None:
    """One call kind's window histogram: the kernel's difference (every call of a kind not recorded; of an
    fsync or AOF write, those whose record the ring buffer could not take) plus its records' (by tid: a slot
    that changed hands still has its records)."""
    counts, sum_ns, max_ns, bytes_ = np.zeros(HIST_BUCKETS, dtype=np.uint64), 0, 0, 0
    if mine:
        hb, ha = tb.hist[kind], (ta.hist[kind] if ta is not None else None)
        counts = hb.buckets - (ha.buckets if ha is not None else 0)
        sum_ns = int(hb.sum_ns) - (int(ha.sum_ns) if ha is not None else 0)
        bytes_ = int(tb.bytes[kind]) - (int(ta.bytes[kind]) if ta is not None else 0)
        max_ns = int(hb.max_ns) if counts.any() else 0  # all-time: histogram_delta keeps it only if in the window
    if records is not None:
        durations, nbytes = records
        h = LatencyHistogram.from_values(durations)
        counts, sum_ns, bytes_, max_ns = counts + h.bucket_counts, sum_ns + h.sum_ns, bytes_ + nbytes, max(max_ns, h.max_ns)
    return histogram_delta(counts, 0, sum_ns, 0, max_ns, bytes_)


REQUEST_EVENTS = ("arrive", "recv", "send")


def request_columns(arr: np.ndarray, origin_ns: int) -> dict:
    """A write-only window's client requests as the kernel saw them, in time order, by column:
    offset_ns (from the window's start), conn (the socket, numbered in order of appearance),
    event (an index into `events`: data arrived, the server read it, the server wrote back) and
    tid (the server's thread that read or wrote; 0 for an arrival) and bytes (read or written; 0
    for an arrival: the replication link's offsets, analysis/replink.py)."""
    unsorted: np.recarray = arr.view(np.recarray)
    ev: np.recarray = unsorted[np.argsort(unsorted.start_ns, kind="stable")].view(np.recarray)
    _, first, conn = np.unique(ev.duration_ns, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # number the sockets by first appearance
    return {"events": list(REQUEST_EVENTS),
            "offset_ns": (ev.start_ns.astype(np.int64) - np.int64(origin_ns)).tolist(),
            "conn": order[conn].tolist(), "event": (ev.state.astype(np.int64) - EVENT_ARRIVE).tolist(),
            "tid": ev.tid.tolist(), "bytes": ev.bytes.tolist()}


_CAUSE_NAMES = np.array(CALL_NAMES, dtype=object)
_EVENT_STATES = np.array(EVENT_STATE_NAMES, dtype=object)


def timeline_json(arr: np.ndarray, origin_ns: int, chunk: int = 4096) -> bytes:
    """timeline_rows as JSON, a chunk of rows at a time: the Python lists a whole window's rows would
    take (~170 bytes a row, tens of thousands of rows) never exist at once."""
    parts = [msgspec.json.encode(timeline_rows(arr[i:i + chunk], origin_ns))[1:-1] for i in range(0, len(arr), chunk)]
    return b"[" + b",".join(p for p in parts if p) + b"]"


def timeline_rows(arr: np.ndarray, origin_ns: int) -> list[list]:
    """The window's blocked-timeline rows, [start - origin_ns, duration, tid, cause, state], from
    ring-buffer records (BLOCK_EVENT_DTYPE): one tolist() per column. A Python loop over the
    records' numpy scalars took ~20 ms of CPU a window at 15K records (appendfsync always, 4 s)."""
    ev: np.recarray = arr.view(np.recarray)
    cols = ((ev.start_ns.astype(np.int64) - np.int64(origin_ns)).tolist(), ev.duration_ns.tolist(),
            ev.tid.tolist(), _CAUSE_NAMES[ev.cause].tolist(), _EVENT_STATES[ev.state].tolist())
    return list(map(list, zip(*cols)))
