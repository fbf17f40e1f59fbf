"""A SIGTERM that lands inside a fork handler (as one did in a CI's record: logging's lock release
after a client's fork) is not lost: its exception is dropped there by Python, the flag stays, and
the recorder raises it again at the next run's edge (stopping.check). Real signals, a real fork."""
import subprocess
import sys

SCRIPT = """
import os, signal, subprocess
{handler}
signal.signal(signal.SIGTERM, handler)
os.register_at_fork(after_in_parent=lambda: signal.raise_signal(signal.SIGTERM))
subprocess.run(["true"], preexec_fn=lambda: None)  # at-fork hooks run with a preexec_fn, as for valkeytrace's clients
print("after the fork", flush=True)
{after}
"""


def _run(handler: str, after: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(handler=handler, after=after)],
                          capture_output=True, text=True, timeout=30)


def test_a_plain_handler_loses_the_signal_inside_a_fork_handler():
    # the witness: what record did before (exit 0 after a SIGTERM, a traceback on stderr)
    res = _run("def handler(s, f):\n    raise KeyboardInterrupt")
    assert res.returncode == 0 and "after the fork" in res.stdout and "Exception ignored" in res.stderr


def test_the_stop_is_kept_and_raised_again_without_a_traceback():
    res = _run("from valkeytrace import stopping\nhandler = stopping.on_signal",
               "try:\n    stopping.check()\nexcept KeyboardInterrupt:\n    print('stopped')")
    assert res.returncode == 0 and res.stdout.split() == ["after", "the", "fork", "stopped"], res
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr
