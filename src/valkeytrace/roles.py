"""Thread roles of a Valkey or Redis server, from their names (/proc/PID/task/*/comm).

Below both server/ (which lists the threads) and analysis/ (which recomputes roles from the
names stored in a recording): the one place a new thread name goes.

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
| vt_offload | vt_offload | valkeytrace's virtual offload (record --emulate-offload), the shim's thread |
"""
from __future__ import annotations

ROLES = ("main", "bio_aof", "bio_close_file", "bio_lazy_free", "bio_other", "io_thread", "jemalloc", "vt_offload",
         "unknown", "other")  # "other": recordings made before the table (their roles are recomputed from names)
ROLE_BY_NAME = {"bio_aof": "bio_aof", "bio_aof_fsync": "bio_aof", "bio_close_file": "bio_close_file",
                "bio_lazy_free": "bio_lazy_free", "bio_rdb_save": "bio_other", "bio_tls_reload": "bio_other",
                "jemalloc_bg_thd": "jemalloc", "vt_offload": "vt_offload"}
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
