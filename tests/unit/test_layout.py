"""The numpy mirrors in valkeytrace.layout agree with the C structs cffi compiled."""
from valkeytrace._native import ffi, lib
from valkeytrace import layout


def _check(ctype, dtype):
    assert ffi.sizeof(ctype) == dtype.itemsize
    for name in dtype.names:
        assert ffi.offsetof(ctype, name) == dtype.fields[name][1], name


def test_hist_layout_matches_c():
    _check("struct vt_hist", layout.HIST_DTYPE)
    assert layout.HIST_BUCKETS == lib.VT_HIST_BUCKETS


def test_block_event_layout_matches_c():
    _check("struct vt_block_event", layout.BLOCK_EVENT_DTYPE)


def test_call_kind_numbers_match_c():
    assert len(layout.CALL_NAMES) == lib.VT_CALL_KINDS
    assert len(layout.STATE_NAMES) == lib.VT_STATE_KINDS


def test_bucket_index_is_monotonic_and_matches_bounds():
    last = -1
    for v in [0, 1, 127, 128, 129, 255, 256, 1000, 4_000_000, 10**9, 2**40 - 1]:
        i = lib.vt_hist_bucket_index(v)
        assert i >= last
        last = i
        assert lib.vt_hist_bucket_lower(i) <= v < lib.vt_hist_bucket_upper(i)


def test_shim_region_layout_matches_c():
    _check("struct vt_shim_thread", layout.SHIM_THREAD_DTYPE)
    _check("struct vt_shim_header", layout.SHIM_HEADER_DTYPE)
    assert lib.vt_shim_region_size() == layout.SHIM_HEADER_DTYPE.itemsize + \
        lib.VT_SHIM_MAX_THREADS * layout.SHIM_THREAD_DTYPE.itemsize


def test_offload_shared_file_layout_matches_c():
    """tracers/offload.py reads the shim's counters and writes its command table through numpy
    dtypes: every field at the offset the C compiler gave it (a moved field would be read as
    another counter, or a command name written over a flag)."""
    from valkeytrace.tracers import offload

    _check("struct vt_offload_stats", offload.STATS_DTYPE)
    _check("struct vt_cmd_entry", offload.CMD_ENTRY_DTYPE)
    _check("struct vt_offload_control", offload.CONTROL_DTYPE)
    _check("struct vt_offload_shared", offload.SHARED_DTYPE)
    assert (offload.MAGIC, offload.VERSION, offload.WAITED_MAX, offload.CMD_MAX, offload.CMD_NAME) == (
        lib.VT_OFFLOAD_MAGIC, lib.VT_OFFLOAD_VERSION, lib.VT_OFFLOAD_WAITED_MAX, lib.VT_CMD_MAX, lib.VT_CMD_NAME)
