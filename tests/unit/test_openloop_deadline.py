"""The open-loop client's deadline holds when the child prints nothing (a hung child once hung
`record`: the deadline was checked only when a line came)."""
import subprocess
import time

import pytest

from valkeytrace.workload.openloop import OpenLoopClient, OpenLoopError


def test_a_silent_child_is_ended_at_the_deadline():
    client = object.__new__(OpenLoopClient)
    client.proc = subprocess.Popen(["sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client.timeout, client.acked = 0.5, None
    t0 = time.monotonic()
    with pytest.raises(OpenLoopError, match="did not finish in time"):
        client.run()
    assert time.monotonic() - t0 < 5 and client.proc.poll() is not None  # ended, not left behind
