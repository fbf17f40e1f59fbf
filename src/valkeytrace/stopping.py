"""A stop asked for by SIGTERM or SIGINT, raised as KeyboardInterrupt where the signal lands (record
and compare stop cleanly and keep what was measured). Also kept as a flag: a signal that lands inside
a fork handler (logging's lock release after subprocess.Popen's fork) has its exception dropped by
Python ("Exception ignored in: <function _releaseLock>"), and a CI's record then ran to its end and
exited 0 after a SIGTERM. The recorder raises it again at the next run's edge (check()), compare after
each launch; the dropped exception is not printed as a traceback. The flag is never cleared: a process
asked to stop stays stopping (a session clearing it would have dropped a stop compare had not yet read)."""
from __future__ import annotations

import sys
import threading

requested = threading.Event()
_default_hook = sys.unraisablehook


def _quiet(u) -> None:
    if isinstance(u.exc_value, KeyboardInterrupt) and requested.is_set():
        return  # kept in `requested`: check() raises it again
    _default_hook(u)


def on_signal(signum, frame):
    requested.set()
    sys.unraisablehook = _quiet
    raise KeyboardInterrupt


def check() -> None:
    """Raise the stop a signal asked for, if one did and its exception was lost."""
    if requested.is_set():
        raise KeyboardInterrupt
