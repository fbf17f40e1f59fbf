"""One server launch recorded in this process (compare's launches, compare --designs' recordings)."""
from __future__ import annotations

from valkeytrace.errors import VTError


def run_launch(plan, tick=None) -> tuple[int, str, bool]:
    """(exit status, error, interrupted): one launch, recorded in this process (as `record --plan` would:
    the probes compiled by the first launch serve the rest, tracers/ebpf_pool.py), tick() called each
    second meanwhile. Ctrl-C or SIGTERM stops it cleanly: what it measured is kept (status 130)."""
    import threading

    from valkeytrace import session
    from valkeytrace.cli.record import outcome_problem

    done = threading.Event()

    def ticking():
        while not done.wait(1.0):
            if tick:
                tick()
    ticker = threading.Thread(target=ticking, name="valkeytrace-compare-tick", daemon=True)
    ticker.start()
    try:
        out = session.run(plan, progress=None, echo=lambda line: None)
    except VTError as exc:
        return 1, f"valkeytrace: error: {exc}", False
    except KeyboardInterrupt:
        return 130, "", True
    finally:
        done.set()
        ticker.join()
    if out.interrupted:
        return 130, "", True
    problem = outcome_problem(out)
    return (1, f"valkeytrace: error: {problem}", False) if problem else (0, "", False)


def complete(path: str) -> bool:
    """A launch's recording that holds its whole matrix (a resumed compare, or compare --designs, keeps it)."""
    import os

    from valkeytrace.recording import format as recfmt

    try:
        return os.path.exists(path) and bool(recfmt.read(path).get("complete"))
    except VTError:
        return False
