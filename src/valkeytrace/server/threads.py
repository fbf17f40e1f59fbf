"""A server's threads as /proc shows them: names, AOF fds, scheduler statistics. What each
thread is (its role) is valkeytrace/roles.py's table."""
from __future__ import annotations

import os

def list_threads(pid: int) -> dict[int, str]:
    """{tid: comm} of the live threads of pid (empty when the process is gone)."""
    out: dict = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                out[int(t)] = f.read().strip()
        except (OSError, ValueError):
            continue
    return out


def aof_fds(pid: int, aof_dir: str) -> list[int]:
    """The fds of pid open on files under aof_dir (the AOF base/incr files, the manifest)."""
    prefix = os.path.realpath(aof_dir).rstrip("/") + "/"
    fds: list = []
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return fds
    for e in entries:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{e}")
        except OSError:
            continue
        if target.startswith(prefix):
            fds.append(int(e))
    return fds


def schedstat(pid: int, tid: int) -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) of a thread from /proc/PID/task/TID/schedstat, or None."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            run, wait, _ = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def schedstats(pid: int, tids) -> dict:
    return {tid: st for tid in tids if (st := schedstat(pid, tid)) is not None}


def sched_delta(a: dict, b: dict, tid: int) -> dict | None:
    """{"on_cpu_ns", "runqueue_ns"} of tid between two schedstats() readings."""
    s0, s1 = a.get(tid), b.get(tid)
    if not s0 or not s1:
        return None
    return {"on_cpu_ns": s1[0] - s0[0], "runqueue_ns": s1[1] - s0[1]}
