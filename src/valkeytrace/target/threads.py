"""Thread roles of a Valkey or Redis server, from /proc/PID/task/*/comm.

One table (ROLE_BY_NAME) says what each thread name a server family gives its threads is; a
name that is in no family's list is `unknown`. The main thread is the one whose tid is the pid.

| thread name | role | servers |
|---|---|---|
| (tid == pid) | main | all |
| bio_aof | bio_aof | Valkey 7.2-9.x, Redis 7.2+ |
| bio_aof_fsync | bio_aof | Redis 6.x-7.0 (the same job: AOF fsync) |
| bio_close_file | bio_close_file | all with bio threads |
| bio_lazy_free | bio_lazy_free | all with bio threads |
| bio_rdb_save, bio_tls_reload, other bio_* | bio_other | Valkey 9.x (and later bio jobs) |
| io_thd_N | io_thread | Redis 6+, Valkey |
| jemalloc_bg_thd | jemalloc | builds with jemalloc background threads |
"""
from __future__ import annotations

import os

ROLES = ("main", "bio_aof", "bio_close_file", "bio_lazy_free", "bio_other", "io_thread", "jemalloc", "unknown",
         "other")  # "other": recordings made before the table (their roles are recomputed from names)
ROLE_BY_NAME = {"bio_aof": "bio_aof", "bio_aof_fsync": "bio_aof", "bio_close_file": "bio_close_file",
                "bio_lazy_free": "bio_lazy_free", "bio_rdb_save": "bio_other", "bio_tls_reload": "bio_other",
                "jemalloc_bg_thd": "jemalloc"}
ROLE_BY_PREFIX = (("io_thd_", "io_thread"), ("bio_", "bio_other"))


def thread_role(tid: int, pid: int, name: str) -> str:
    if tid == pid:
        return "main"
    if name in ROLE_BY_NAME:
        return ROLE_BY_NAME[name]
    for prefix, role in ROLE_BY_PREFIX:
        if name.startswith(prefix):
            return role
    return "unknown"


def list_threads(pid: int) -> dict[int, str]:
    """{tid: comm} of the live threads of pid (empty when the process is gone)."""
    out = {}
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
    fds = []
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
