"""The eBPF probe plan without root or bcc: groups from the options and the server's facts, the
defines the program is compiled with, and the uprobes it attaches."""
import pytest

from valkeytrace.tracers import ebpf_plan
from valkeytrace.tracers.sites import CallSite


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("VALKEYTRACE_PROBES", raising=False)
    monkeypatch.setenv("VALKEYTRACE_RAW_SCHED", "0")  # no BTF read: task offsets 0 (for these tests only)


def make(extra=(), symbols=("beforeSleep", "flushAppendOnlyFile"), fstype="ext4", tracepoints=True):
    return ebpf_plan.plan(extra_groups=extra, block_threshold_ns=100_000, symbol=lambda s: 0x1000 + len(s) if s in symbols else None,
                          fstype=fstype, fs_tracepoints_present=lambda fs, names: tracepoints)


def test_defaults_on_ext4_time_fsyncs_at_the_filesystem():
    p = make()
    assert p.groups == {"calls", "fs", "sched", "requests"} and p.fs_sync and not p.loop_uprobe
    d = p.defines()
    assert d["TRACE_FS_SYNC"] == 1 and d["TRACE_SYSCALLS"] == 0
    assert "TARGET_TGID" not in d  # the pid is the `target` map's: one program for every launch


@pytest.mark.parametrize("fstype, tracepoints", [("xfs", True), ("ext4", False), (None, True)])
def test_without_ext4_tracepoints_the_calls_come_from_call_sites(fstype, tracepoints):
    p = make(fstype=fstype, tracepoints=tracepoints)
    assert "fs" not in p.groups and p.defines()["TRACE_FS_SYNC"] == 0


def test_options_add_their_groups_and_syscalls_displace_fs():
    p = make(ebpf_plan.extra_groups(aof_flush_probe=True, loop_sample=True, socket_writes=True))
    assert {"flush", "loop", "syscalls"} <= p.groups and "fs" not in p.groups
    assert p.loop_uprobe and p.flush_probe


def test_a_loop_sample_without_the_symbol_falls_back_to_epoll_wait():
    p = make(("loop",), symbols=())
    assert not p.loop_uprobe and "syscalls" in p.groups and p.defines()["LOOP_FROM_EPOLL"] == 1


def test_printable_program_follows_the_plan():
    a = ebpf_plan.printable_program(make().defines(), make().groups)
    b = make(ebpf_plan.extra_groups(socket_writes=True))
    assert a != ebpf_plan.printable_program(b.defines(), b.groups)
    assert a.startswith("// probe groups: calls, fs, sched, requests\n")


def test_uprobes_for_call_sites_the_loop_sample_and_the_shim():
    site = CallSite(kind="fdatasync", function="aofFsync", call=0x10, exit=0x15, exit_emulated=True)
    p = make(("loop",), fstype=None)
    sampled, always, shim = ebpf_plan.uprobes("/bin/v", p, [site], None, loop_duty=0.005)
    assert sampled.addr == 0x1000 + len("beforeSleep") and not shim
    assert [(u.fn, u.addr) for u in always] == [("on_site_fdatasync", 0x10), ("on_site_exit", 0x15)]
    # under the fs tracepoints ext4 ends the call; the shim's wrappers are probed for an injected delay
    p = make()
    sampled, always, shim = ebpf_plan.uprobes("/bin/v", p, [], "/lib/shim.so", loop_duty=0.005)
    assert sampled is None and shim and {u.path for u in always} == {"/lib/shim.so"}


def test_the_call_logs_share_a_fixed_budget_over_the_cpus_within_bounds():
    from valkeytrace.tracers.ebpf_plan import call_log_bits
    # 16 MiB of 32-byte records: 32K a CPU on a small host, fewer as CPUs are added, never under 1K
    assert [call_log_bits(n) for n in (1, 2, 16, 64, 512, 100_000)] == [15, 15, 15, 13, 10, 10]
