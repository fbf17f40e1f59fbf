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
