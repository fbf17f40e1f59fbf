"""tracers/bpf_cost.py's pure parts: what a program is attached to, by bcc's names and the uprobe plan."""
from types import SimpleNamespace as NS

from valkeytrace.tracers.bpf_cost import attach_point
from valkeytrace.tracers.ebpf_plan import Uprobe


def test_attach_points_from_names_and_the_uprobe_plan():
    bpf = NS(raw_tracepoint_fds={b"sched_switch": 3, b"sock_recv_length": 4})
    ups = [Uprobe("/bin/valkey", "on_site_aof_write", addr=0x10), Uprobe("/bin/valkey", "on_flush_enter", sym="flushAppendOnlyFile"),
           Uprobe("/bin/valkey", "on_flush_return", sym="flushAppendOnlyFile", ret=True)]
    assert attach_point("tracepoint__sched__sched_switch", bpf, ups) == "tracepoint:sched:sched_switch"
    assert attach_point("raw_tracepoint__ext4_sync_file_exit", bpf, ups) == "raw_tracepoint:ext4_sync_file_exit"
    assert attach_point("on_site_aof_write", bpf, ups) == "uprobe:0x10"
    assert attach_point("on_flush_return", bpf, ups) == "uprobe:flushAppendOnlyFile (return)"
    assert attach_point("on_sock_recv", bpf, ups).startswith("raw_tracepoint:")
    assert attach_point("nothing_known", bpf, ups) == "?"
