"""The calibration pass's waiting rule (workload/benchmark.calibrate), against a scripted client
that prints progress lines the way redis-benchmark 7.0 does. Not a benchmark client: the rule
under test is when calibrate stops reading and what rate it keeps."""
import stat
import sys
import textwrap

import pytest

from valkeytrace.workload.benchmark import ENDLESS_REQUESTS, BenchmarkError, calibrate, client_argv
from valkeytrace.workload.clients import BenchmarkClient

LATE_FIRST_LINE = """
    import sys, time
    # check 09 met a client whose first progress line came only after 1 s and read rps 0
    # (its 50 connections still being made): calibrate must wait for a rate, not fail
    time.sleep(1.1)
    sys.stdout.write("GET: rps=0.0 (overall: 0.0) avg_msec=-nan (overall: -nan)\\r"); sys.stdout.flush()
    for i in range(1, 200):
        time.sleep(0.125)
        sys.stdout.write(f"GET: rps=40000.0 (overall: {40000.0 + i:.1f}) avg_msec=1.0 (overall: 1.0)\\r")
        sys.stdout.flush()
"""

SILENT_EXIT = """
    import sys
    sys.stdout.write("Could not connect to Redis at 127.0.0.1:1: Connection refused\\n")
    sys.exit(1)
"""


def fake_client(tmp_path, body):
    path = tmp_path / "fake-benchmark"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return BenchmarkClient(path=str(path), name="redis-benchmark", version="7.0.15")


def _argv(tmp_path, body) -> list[str]:
    """The endless GET test's argv for the scripted client (it ignores its arguments)."""
    return client_argv(fake_client(tmp_path, body), "127.0.0.1", 1, "GET", 50, 64, 1000, ENDLESS_REQUESTS)


RAMP = """
    import sys, time
    # connecting and warming up: the overall rate lags the rate the run then keeps
    for i in range(1, 200):
        time.sleep(0.1)
        rps = 10000.0 if i < 4 else 40000.0
        sys.stdout.write(f"GET: rps={rps:.1f} (overall: {min(40000.0, 10000.0 * i):.1f}) avg_msec=1.0 (overall: 1.0)\\r")
        sys.stdout.flush()
"""


def test_a_late_first_progress_line_at_zero_is_waited_for(tmp_path):
    rate = calibrate(fake_client(tmp_path, LATE_FIRST_LINE), _argv(tmp_path, LATE_FIRST_LINE), seconds=1.0)
    assert rate == 40000.0  # the steady rate the client printed after its zero line


def test_the_rate_kept_is_the_steady_one_not_the_ramp(tmp_path):
    """The overall rate of a 1 s pass counts the ramp (here 25% of it at a quarter of the rate):
    sized by it, measured runs ended early (0.9 s of --duration 2)."""
    rate = calibrate(fake_client(tmp_path, RAMP), _argv(tmp_path, RAMP), seconds=1.0)
    assert rate == 40000.0


def test_a_client_that_exits_without_progress_is_an_error(tmp_path):
    with pytest.raises(BenchmarkError, match="no progress while calibrating GET"):
        calibrate(fake_client(tmp_path, SILENT_EXIT), _argv(tmp_path, SILENT_EXIT), seconds=1.0)
