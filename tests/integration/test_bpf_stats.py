"""The tracer's own cost is counted by the kernel while a tracer holds the statistics on
(tracers/bpf_cost.py, csrc/vt_bpfstats.c): each tracer its own hold, the sysctl never written, a killed
tracer's hold given back. The witness is a real program's run count in the kernel's fdinfo, moved by
getppid(2) calls made here: it moves only while someone holds the statistics on. Timed: it runs alone
(a recording on another worker holds them on too)."""
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timed]

PROGRAM = b"TRACEPOINT_PROBE(syscalls, sys_enter_getppid) { return 0; }"
CALLS = 2000


@pytest.fixture
def program(needs_bpf):
    from valkeytrace.tracers import bcc_child

    bpf = bcc_child.compile_program(PROGRAM, [], cache=False)
    try:
        yield bpf
    finally:
        bpf.cleanup()


def runs(bpf) -> int:
    from valkeytrace.tracers import bpf_cost

    fd = bpf.funcs[b"tracepoint__syscalls__sys_enter_getppid"].fd
    got = bpf_cost._fdinfo(fd)
    assert got is not None, "no run_cnt in the program's fdinfo"
    return got[0]


def moved(bpf) -> int:
    before = runs(bpf)
    for _ in range(CALLS):
        os.getppid()
    return runs(bpf) - before


def test_two_tracers_each_hold_the_statistics_and_the_sysctl_is_never_written(program):
    from valkeytrace.tracers import bpf_cost

    assert bpf_cost.stats_state() == 0, "kernel.bpf_stats_enabled is on: nothing to witness"
    assert moved(program) == 0  # off: the kernel counts nothing
    a, b = bpf_cost.Cost(), bpf_cost.Cost()
    a.enable()
    b.enable()
    try:
        assert a.turned_on and b.turned_on
        assert bpf_cost.stats_state() == 0  # held, not written
        assert moved(program) >= CALLS
        a.restore()  # the first tracer stops: the second's window is still counted
        assert moved(program) >= CALLS
    finally:
        a.restore()
        b.restore()
    assert moved(program) == 0 and bpf_cost.stats_state() == 0


def test_a_killed_tracer_gives_its_hold_back(program):
    from valkeytrace.tracers import bpf_cost

    assert bpf_cost.stats_state() == 0
    holder = subprocess.Popen([sys.executable, "-c", "from valkeytrace.tracers import bpf_cost; import time; "
                               "c = bpf_cost.Cost(); c.enable(); assert c.turned_on; print('held', flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert moved(program) >= CALLS
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        time.sleep(0.05)
        assert moved(program) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    assert bpf_cost.stats_state() == 0
