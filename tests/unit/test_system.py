"""Host CPU accounting (valkeytrace.system) and the benchmark client's scheduler totals."""
import sys

import pytest

from valkeytrace import system
from valkeytrace.workload.benchmark import ClientProcess


def _snap(mono, bg_wait_ns):
    return system.CpuSnapshot(mono=mono, host_busy_s=2.0 * mono, host_idle_s=0.0, steal_s=[], server_s=0.5 * mono,
                              tracer_s=0.0, clients_s={7: 0.3 * mono}, clients_sched={7: (int(0.3e9 * mono), bg_wait_ns)})


def test_cpu_window_gives_the_clients_cpu_wait():
    # over a 2 s window the background client waited 0.5 s: 25%; the measured one 0.9 s of its 1.8 s
    out = system.cpu_window(_snap(10.0, 1_000_000_000), _snap(12.0, 1_500_000_000),
                            system.MeasuredClient(cpu_s=0.6, wait_s=0.9, lifetime_s=1.8))
    assert (out.clients_cpu_wait.measured, out.clients_cpu_wait.background) == (0.5, 0.25)
    assert out.clients_cores == pytest.approx((0.6 + 0.6) / 2)
    # no schedstat: no figure, the rest as before
    a, b = _snap(10.0, 0), _snap(12.0, 0)
    a.clients_sched = b.clients_sched = {7: None}
    assert system.cpu_window(a, b, system.MeasuredClient(cpu_s=0.6)).clients_cpu_wait is None


def test_the_host_is_busy_where_it_was_not_idle_when_the_sampled_busy_says_less():
    # the busy columns are sampled at the tick and missed a third of a core of the clients' short
    # bursts; the idle time is measured at each idle entry: 2 CPUs, 2 s, 1.0 s idle -> 1.5 cores
    a, b = _snap(10.0, 0), _snap(12.0, 0)
    a.host_busy_s, a.host_idle_s, a.steal_s = 0.0, 5.0, [0.0, 0.0]
    b.host_busy_s, b.host_idle_s, b.steal_s = 1.0, 6.0, [0.0, 0.0]
    out = system.cpu_window(a, b)
    assert out.host_cores == 1.5 and out.other_cores == pytest.approx(1.5 - 0.5 - 0.3)
    # no steal figures (the per-CPU times unread): the sampled busy
    a.steal_s = b.steal_s = []
    assert system.cpu_window(a, b).host_cores == 0.5


def test_a_client_s_scheduler_totals_are_read_between_its_exit_and_its_reaping():
    # a real child that spins ~0.3 s of CPU: its totals come from /proc after it exits, before
    # wait() reaps it (afterwards /proc has nothing of it)
    proc = ClientProcess([sys.executable, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass"])
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        proc.stop()
    on_cpu_ns, wait_ns = proc.sched
    assert on_cpu_ns >= 0.25e9 and wait_ns >= 0
    assert system.process_schedstat(proc.pid) is None  # reaped


def test_a_client_that_does_not_exit_in_time_is_not_waited_for():
    proc = ClientProcess([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert proc.wait(timeout=0.2) is None and proc.sched is None
    finally:
        proc.stop()


def test_a_cpus_speed_is_summarized_by_its_fastest_and_slowest_tenths():
    from valkeytrace import cpuspeed

    sp = cpuspeed.spread(0, [10.0] * 6 + [18.0] * 4)  # this VM's two speeds, 1.8x apart
    assert (sp.fast_ms, sp.slow_ms, sp.ratio, sp.slow_share, sp.unstable) == (10.0, 18.0, 1.8, 0.4, True)
    assert not cpuspeed.spread(1, [10.0, 10.5, 11.0, 10.2]).unstable
    with pytest.raises(ValueError):
        cpuspeed.spread(0, [])


def test_a_busy_neighbour_on_the_cpu_is_not_a_slow_cpu():
    # the samples are the thread's own CPU time: a process spinning on the same CPU takes half its
    # wall time, not its speed (~10 ms samples, longer than a scheduler slice: timed by the wall clock,
    # each would take ~2x). Paired, the neighbour stopped and running in turn: this VM's CPUs change
    # speed by up to 1.8x over seconds (two samples minutes apart once read 10.3 and 17.5 ms, the
    # suite's other workers busy), faster than a pair's 50 ms.
    import os
    import signal
    import statistics
    import subprocess
    import time
    from valkeytrace import cpuspeed

    cpu = min(os.sched_getaffinity(0))
    hog = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c",
                            "import time\nt = time.time() + 60\nwhile time.time() < t: pass"])

    def hog_ran_ns() -> int:  # the kernel's own count of the neighbour's time on a CPU (schedstat)
        with open(f"/proc/{hog.pid}/schedstat") as f:
            return int(f.read().split()[0])

    cpu_ratio, hog_share, hog_alone = [], [], []
    try:
        for _ in range(15):
            pair = []
            for sig in (signal.SIGSTOP, signal.SIGCONT):
                os.kill(hog.pid, sig)
                time.sleep(0.01)
                t, ran = time.monotonic(), hog_ran_ns()
                ms = cpuspeed.samples(cpu, 1, 300_000, 0.0)[0]
                pair.append((ms, time.monotonic() - t, hog_ran_ns() - ran))
            (alone, alone_wall, ran_alone), (shared, shared_wall, ran_shared) = pair
            cpu_ratio.append(shared / alone)
            hog_alone.append(ran_alone / 1e9 / alone_wall)
            hog_share.append(ran_shared / 1e9 / shared_wall)
    finally:
        hog.kill()
        hog.wait()
    # the CPU time did not follow the neighbour. The witness that the neighbour took the CPU is the kernel's,
    # not the wall clock's (which the suite's other workers blur: 1.14x once in CI against ~2x alone): the
    # stopped neighbour ran next to nothing beside the "alone" samples (16 us once, its stop taking effect late
    # under load), and beside the "shared" ones it ran on the
    # sampler's CPU for a share of the wall time a fair scheduler gives it among what runs there: 0.36-0.58 of
    # it beside six helpers' recordings, a median 0.23 in the suite's first phase (2026-12-07), never under a
    # tenth: ten times what the stopped one ran
    assert statistics.median(cpu_ratio) <= 1.25, (cpu_ratio, hog_share)
    assert statistics.median(hog_alone) <= 0.01, hog_alone
    assert statistics.median(hog_share) >= 0.1, (cpu_ratio, hog_share)
