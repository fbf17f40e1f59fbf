"""Where the benchmark clients run (workload/placement.py): the auto policy by hand, the CPU-list
syntax, and a real child process put on the CPUs it was given."""
import os
import sys

import pytest

from valkeytrace.errors import VTUsageError
from valkeytrace.system import format_cpu_list
from valkeytrace.workload import placement
from valkeytrace.workload.benchmark import ClientProcess


def test_auto_keeps_the_clients_apart_from_the_server():
    # 2 CPUs, a server with one main thread: the clients share the last CPU, the server keeps one
    assert placement.auto_cpus([0, 1], [0, 1], 1) == (1,)
    # 8 CPUs, 4 server threads: the GET and SET client processes get one each
    assert placement.auto_cpus(range(8), range(8), 4) == (6, 7)
    # a server that needs every CPU still keeps all but one: the clients get the last
    assert placement.auto_cpus([0, 1], [0, 1], 2) == (1,)
    # a pinned server: the clients go where it is not
    assert placement.auto_cpus([0, 1, 2, 3], [2, 3], 1) == (0, 1)
    assert placement.auto_cpus([0, 1, 2, 3], [0, 1, 2], 1) == (3,)
    # one CPU: nothing to keep apart
    assert placement.auto_cpus([0], [0], 1) is None


def test_a_launched_server_gets_the_rest_when_it_is_enough():
    assert placement.server_cpus_for((1,), [0, 1], 1) == (0,)
    assert placement.server_cpus_for((6, 7), range(8), 4) == (0, 1, 2, 3, 4, 5)
    # two threads that busy-poll (main + an I/O thread) must not share one CPU: not moved
    assert placement.server_cpus_for((1,), [0, 1], 2) is None
    assert placement.server_cpus_for(None, [0, 1], 1) is None  # clients not placed: nor is the server


def test_cpu_lists_parse_and_print_as_the_kernel_writes_them():
    assert placement.parse_cpu_list("1") == (1,)
    assert placement.parse_cpu_list("0,2-3") == (0, 2, 3)
    assert format_cpu_list((0, 2, 3)) == "0,2-3" and format_cpu_list([5]) == "5"
    for bad in ("", "a", "1-", "3-1", "1,,2"):
        with pytest.raises(VTUsageError, match="--client-cpus"):
            placement.parse_cpu_list(bad)


def test_choose_refuses_a_cpu_this_process_cannot_use():
    allowed = sorted(os.sched_getaffinity(0))
    assert placement.choose("none", None, 1) is None
    assert placement.choose(str(allowed[-1]), None, 1) == (allowed[-1],)
    with pytest.raises(VTUsageError, match="is not one this process may run on"):
        placement.choose(str(max(allowed) + 1), None, 1)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to tell a placement from none")
def test_a_client_runs_on_the_cpus_it_was_given():
    cpu = sorted(os.sched_getaffinity(0))[-1]
    # the child reads its own affinity after the parent has set it (a client is still starting up then)
    proc = ClientProcess([sys.executable, "-c", "import os, time; time.sleep(0.3); print(sorted(os.sched_getaffinity(0)))"],
                         (cpu,))
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        proc.stop()
    assert proc.output.strip() == f"[{cpu}]"
