"""numpy mirrors of the C layouts in csrc/valkeytrace.h (checked against cffi by a unit test)."""
import numpy as np

from valkeytrace._native import lib

HIST_BUCKETS = lib.VT_HIST_BUCKETS

# call kinds and off-CPU states: same numbers as VT_CALL_* / VT_STATE_* in valkeytrace.h
CALL_FDATASYNC, CALL_FSYNC, CALL_AOF_WRITE, CALL_SOCKET_WRITE = 0, 1, 2, 3
CALL_EPOLL_WAIT, CALL_LOOP_ITERATION, CALL_AOF_FLUSH, CALL_OTHER = 4, 5, 6, 7
CALL_NAMES = ("fdatasync", "fsync", "aof_write", "socket_write", "epoll_wait",
              "loop_iteration", "aof_flush", "other")
STATE_RUNNABLE, STATE_SLEEPING, STATE_IO = 0, 1, 2
STATE_NAMES = ("runnable", "sleeping", "io")
EVENT_CALL = 3  # vt_block_event.state of a whole-call event (VT_EVENT_CALL)
EVENT_ARRIVE, EVENT_RECV, EVENT_SEND = 4, 5, 6  # a client request's moments (VT_EVENT_ARRIVE/RECV/SEND)
EVENT_STATE_NAMES = STATE_NAMES + ("call", "arrive", "recv", "send")

HIST_DTYPE = np.dtype([
    ("count", "<u8"), ("sum_ns", "<u8"), ("min_ns", "<u8"), ("max_ns", "<u8"),
    ("buckets", "<u8", (HIST_BUCKETS,)),
])

BLOCK_EVENT_DTYPE = np.dtype([
    ("start_ns", "<u8"), ("duration_ns", "<u8"), ("tid", "<u4"), ("cause", "<u2"), ("state", "<u2"),
    ("bytes", "<u4"), ("pad", "<u4"),
])

CALL_KINDS = len(CALL_NAMES)

SHIM_THREAD_DTYPE = np.dtype([
    ("tid", "<u4"), ("claimed", "<u4"), ("name", "S16"), ("bytes", "<u8", (CALL_KINDS,)),
    ("injected_ns", "<u8"), ("hist", HIST_DTYPE, (CALL_KINDS,)),
])

SHIM_HEADER_DTYPE = np.dtype([
    ("magic", "<u4"), ("version", "<u4"), ("max_threads", "<u4"), ("nthreads", "<u4"), ("pid", "<u4"),
    ("hist_buckets", "<u4"), ("paused", "<u4"), ("untimed", "<u4"), ("thread_size", "<u8"), ("dropped_calls", "<u8"), ("inject_delay_ns", "<u8"), ("extra_delay_ns", "<u8"),
])
