"""The native ring-buffer consumer (csrc/events.c), called as libbpf would call it."""
import numpy as np

from valkeytrace._native import ffi, lib
from valkeytrace.layout import BLOCK_EVENT_DTYPE


def collect(sink, records):
    for rec in records:
        buf = ffi.from_buffer(rec)
        assert lib.vt_event_sink_collect(sink, buf, len(rec)) == 0


def test_records_come_back_in_order_across_growth():
    # GIVEN a sink for 24-byte events and 1,000 events (the buffer grows from 64 records)
    sink = ffi.new("struct vt_event_sink *", {"record_size": BLOCK_EVENT_DTYPE.itemsize})
    events = np.zeros(1000, dtype=BLOCK_EVENT_DTYPE)
    events["start_ns"] = np.arange(1000) * 7
    events["duration_ns"] = np.arange(1000) + 100
    events["tid"] = 42
    try:
        collect(sink, [e.tobytes() for e in events])
        # THEN the drained bytes are exactly the events, none dropped
        got = np.frombuffer(ffi.buffer(sink.buf, sink.len)[:], dtype=BLOCK_EVENT_DTYPE)
        assert (got == events).all()
        assert sink.records == 1000 and sink.dropped == 0
    finally:
        lib.vt_event_sink_free(sink)
    assert sink.buf == ffi.NULL and sink.len == 0


def test_short_records_are_padded_and_long_ones_cut_to_the_record_size():
    sink = ffi.new("struct vt_event_sink *", {"record_size": 8})
    try:
        collect(sink, [b"abc", b"0123456789"])
        assert ffi.buffer(sink.buf, sink.len)[:] == b"abc\0\0\0\0\0" + b"01234567"
    finally:
        lib.vt_event_sink_free(sink)


def test_a_full_sink_counts_what_it_refuses():
    # GIVEN a sink capped at 64 records of 8 bytes (its first allocation)
    sink = ffi.new("struct vt_event_sink *", {"record_size": 8, "max_bytes": 64 * 8})
    try:
        collect(sink, [b"x" * 8] * 70)
        # THEN it keeps 64 and counts 6 dropped (reported as lost events)
        assert sink.len == 64 * 8 and sink.records == 64 and sink.dropped == 6
    finally:
        lib.vt_event_sink_free(sink)


def test_timeline_rows_are_the_records_relative_to_the_window():
    from valkeytrace.layout import CALL_NAMES, EVENT_STATE_NAMES
    from valkeytrace.tracers.ebpf_window import timeline_rows

    # GIVEN records of every cause and state, one starting before the window's origin
    rng = np.random.default_rng(7)
    n = 500
    arr = np.zeros(n, dtype=BLOCK_EVENT_DTYPE)
    origin = 5_000_000_000_000
    arr["start_ns"] = origin + rng.integers(-2_000_000, 4_000_000_000, n)
    arr["duration_ns"] = rng.integers(100_000, 9_000_000, n)
    arr["tid"] = rng.choice([4242, 4250, 4251], n)
    arr["cause"] = rng.integers(0, len(CALL_NAMES), n)
    arr["state"] = rng.integers(0, len(EVENT_STATE_NAMES), n)
    arr["start_ns"][0] = origin - 1_500
    # WHEN they become timeline rows
    rows = timeline_rows(arr, origin)
    # THEN each row is the record, its start as a signed offset from the origin, names for codes,
    # and plain Python values (the recording is JSON)
    want = [[int(r["start_ns"]) - origin, int(r["duration_ns"]), int(r["tid"]), CALL_NAMES[r["cause"]],
             EVENT_STATE_NAMES[r["state"]]] for r in arr]
    assert rows == want
    assert rows[0][0] == -1_500
    assert all(type(v) in (int, str) for row in rows for v in row)


def test_timeline_json_is_the_rows_whatever_the_chunk():
    """The window's timeline as the JSON the recording holds: the rows of timeline_rows, in order,
    whether encoded in one chunk or many (and an empty window is an empty list)."""
    import msgspec
    import numpy as np

    from valkeytrace.layout import BLOCK_EVENT_DTYPE
    from valkeytrace.tracers.ebpf_window import timeline_json, timeline_rows

    arr = np.zeros(10, dtype=BLOCK_EVENT_DTYPE)
    arr["start_ns"] = np.arange(10) * 1000 + 5000
    arr["duration_ns"] = np.arange(10) + 1
    arr["tid"] = 42
    rows = timeline_rows(arr, 5000)
    for chunk in (1, 3, 10, 4096):
        assert msgspec.json.decode(timeline_json(arr, 5000, chunk)) == rows
    assert timeline_json(arr[:0], 5000) == b"[]"


def call_logs(cpus: int, size: int) -> np.ndarray:
    """Per-CPU call logs laid out as the probe's mmapped array (csrc/valkeytrace.h: a 128-byte head, then
    size records): head at byte 0, tail at byte 64 of each."""
    return np.zeros(cpus * (128 + size * BLOCK_EVENT_DTYPE.itemsize), dtype=np.uint8)


def write_calls(logs: np.ndarray, cpu: int, size: int, starts) -> None:
    """What the probe does per call: the record at head % size, then head + 1."""
    stride = 128 + size * BLOCK_EVENT_DTYPE.itemsize
    head = logs[cpu * stride:cpu * stride + 8].view(np.uint64)
    recs = logs[cpu * stride + 128:(cpu + 1) * stride].view(BLOCK_EVENT_DTYPE)
    for s in starts:
        recs[int(head[0]) % size] = (s, 10, 7, 1, 3, 100, 0)
        head[0] += 1


def test_call_logs_are_taken_from_every_cpu_across_the_wrap_and_once():
    # GIVEN two CPUs' logs of 8 records, CPU 1 having wrapped (12 written, 5 taken before)
    size, cpus = 8, 2
    logs = call_logs(cpus, size)
    stride = 128 + size * BLOCK_EVENT_DTYPE.itemsize
    write_calls(logs, 0, size, [1, 2, 3])
    write_calls(logs, 1, size, range(100, 105))
    sink = ffi.new("struct vt_event_sink *", {"record_size": BLOCK_EVENT_DTYPE.itemsize})
    base = ffi.from_buffer("uint8_t[]", logs)
    try:
        assert lib.vt_call_logs_take(sink, base, stride, cpus, size, 1) == 8
        write_calls(logs, 1, size, range(105, 112))  # 7 more: slots 5..11 % 8, past the end
        sink.len = 0
        # THEN the second take returns exactly the 7 new records, in order, and moves both tails to the heads
        assert lib.vt_call_logs_take(sink, base, stride, cpus, size, 1) == 7
        got = np.frombuffer(ffi.buffer(sink.buf, sink.len)[:], dtype=BLOCK_EVENT_DTYPE)
        assert got["start_ns"].tolist() == list(range(105, 112))
        assert (got["state"] == 3).all() and (got["bytes"] == 100).all()
        tails = [int(logs[c * stride + 64:c * stride + 72].view(np.uint64)[0]) for c in range(cpus)]
        assert tails == [3, 12]
        # AND a take with nothing new returns nothing; one that drops (keep=0) moves the tail all the same
        assert lib.vt_call_logs_take(sink, base, stride, cpus, size, 1) == 0
        write_calls(logs, 0, size, [4])
        assert lib.vt_call_logs_take(sink, base, stride, cpus, size, 0) == 1 and sink.records == 15
    finally:
        ffi.release(base)
        lib.vt_event_sink_free(sink)
