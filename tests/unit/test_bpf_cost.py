"""tracers/bpf_cost.py's pure parts: what a program is attached to, from what the program attached
(tracers/bpf_fd.Program.attached) and the uprobe plan."""
from types import SimpleNamespace as NS

from valkeytrace.tracers.bpf_cost import attach_point
from valkeytrace.tracers.ebpf_plan import Uprobe


def test_attach_points_from_what_was_attached_and_the_uprobe_plan():
    bpf = NS(attached={b"raw_tracepoint__sched_switch": {"raw_tracepoint:sched_switch"},
                       b"on_sock_recv": {"raw_tracepoint:sock_recv_length"},
                       b"tracepoint__sched__sched_wakeup": {"tracepoint:sched:sched_wakeup"},
                       b"on_site_aof_write": {"uprobe"}})
    ups = [Uprobe("/bin/valkey", "on_site_aof_write", addr=0x10), Uprobe("/bin/valkey", "on_flush_enter", sym="flushAppendOnlyFile"),
           Uprobe("/bin/valkey", "on_flush_return", sym="flushAppendOnlyFile", ret=True)]
    assert attach_point("tracepoint__sched__sched_wakeup", bpf, ups) == "tracepoint:sched:sched_wakeup"
    assert attach_point("raw_tracepoint__sched_switch", bpf, ups) == "raw_tracepoint:sched_switch"
    assert attach_point("on_site_aof_write", bpf, ups) == "uprobe:0x10"
    assert attach_point("on_flush_return", bpf, ups) == "uprobe:flushAppendOnlyFile (return)"
    assert attach_point("on_sock_recv", bpf, ups) == "raw_tracepoint:sock_recv_length"
    assert attach_point("raw_tracepoint__ext4_sync_file_exit", bpf, ups) is None  # loaded, never attached
