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
