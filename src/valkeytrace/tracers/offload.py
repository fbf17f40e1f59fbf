"""The virtual offload (record --emulate-offload durable|early-ack): valkey#3381's mechanism
emulated by the preloaded shim (csrc/offload.c) on any build. This module makes its statistics
file, gives the server's environment, reads the counters at each window's edges, and sums a
recording's runs into `emulation.offload` (docs/recording-format.md).
"""
from __future__ import annotations

import mmap
import os
import secrets

import numpy as np

from valkeytrace.errors import VTUsageError
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.layout import HIST_BUCKETS, HIST_DTYPE

MODES = ("durable", "early-ack")
MAGIC, VERSION, WAITED_MAX = 0x4F465456, 1, 8
COUNTERS = ("jobs", "job_bytes", "offloaded_writes", "offloaded_syncs", "write_commands", "held_replies",
            "held_bytes", "released_replies", "early_replies", "dropped_replies", "released_after_write",
            "jobs_waited_sum")
STATS_DTYPE = np.dtype([("magic", "<u4"), ("version", "<u4"), ("mode", "<u4"), ("hist_buckets", "<u4")]
                       + [(c, "<u8") for c in COUNTERS]
                       + [("jobs_waited", "<u8", (WAITED_MAX,)), ("job_ns", HIST_DTYPE), ("hold_ns", HIST_DTYPE)])
DESCRIPTION = {"durable": "virtual offload (emulated #3381): the main thread's AOF write and fdatasync run on "
                          "the shim's vt_offload thread, replies to writes held until their batch is durable",
               "early-ack": "virtual offload (emulated #3381, early-ack): the main thread's AOF write and "
                            "fdatasync run on the shim's vt_offload thread, nothing held (SETs acknowledged "
                            "before their fsync)"}


def check_usage(mode: str | None, appendfsync: str, attached: bool, has_command: bool) -> None:
    """One line, before anything starts, for what the emulation cannot do."""
    if not mode:
        return
    if attached:
        raise VTUsageError("--emulate-offload needs a server valkeytrace launches (the shim is preloaded); "
                           "it cannot apply to --attach")
    if appendfsync != "always" and not has_command:
        raise VTUsageError(f"--emulate-offload emulates #3381, which offloads appendfsync always; "
                           f"this server would run appendfsync {appendfsync}")


class OffloadStats:
    """The statistics file the shim maps ($VALKEYTRACE_OFFLOAD_STATS): made 0600 and exclusive in
    /dev/shm, removed on close."""

    def __init__(self, mode: str):
        if mode not in MODES:
            raise VTUsageError(f"--emulate-offload {mode!r}: expected durable or early-ack")
        self.mode = mode
        self.path = os.path.join("/dev/shm", f"valkeytrace-offload-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, STATS_DTYPE.itemsize)
            self.mm = mmap.mmap(fd, STATS_DTYPE.itemsize, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def chown(self, uid: int, gid: int):
        os.chown(self.path, uid, gid)

    def env(self) -> dict:
        return {"VALKEYTRACE_OFFLOAD": self.mode, "VALKEYTRACE_OFFLOAD_STATS": self.path}

    def snapshot(self) -> np.ndarray | None:
        """The counters now (a copy), or None while the shim has not mapped the file."""
        s = np.frombuffer(self.mm, dtype=STATS_DTYPE, count=1)[0].copy()
        if int(s["magic"]) != MAGIC or int(s["version"]) != VERSION or int(s["hist_buckets"]) != HIST_BUCKETS:
            return None
        return s

    def close(self):
        from valkeytrace.tracers.region import close_shared

        close_shared(self.mm, self.path)


def _hist(a, b) -> LatencyHistogram:
    return LatencyHistogram.from_bucket_counts(b["buckets"] - a["buckets"], sum_ns=int(b["sum_ns"] - a["sum_ns"]),
                                               max_ns=int(b["max_ns"]))


def window(a: np.ndarray | None, b: np.ndarray | None) -> dict | None:
    """One run's figures: counters between two snapshots, the job and hold histograms."""
    if a is None or b is None:
        return None
    out = {c: int(b[c] - a[c]) for c in COUNTERS}
    out["jobs_waited"] = [int(x) for x in b["jobs_waited"] - a["jobs_waited"]]
    out["job_ns"] = _hist(a["job_ns"], b["job_ns"]).to_dict()
    out["hold_ns"] = _hist(a["hold_ns"], b["hold_ns"]).to_dict()
    return out


def summary(mode: str, runs: list[dict]) -> dict:
    """emulation.offload: the recording's totals, and what a SET waited for, from the write-only
    runs (every held reply there answers a SET) when there are any, else from all."""
    measured = [r for r in runs if r.get("status") == "ok" and r.get("offload")]
    write_only = [r for r in measured if r["workload"] == "write-only"]
    basis = write_only or measured
    tot = {c: sum(r["offload"][c] for r in measured) for c in COUNTERS}
    b = {c: sum(r["offload"][c] for r in basis) for c in COUNTERS}
    jobs = LatencyHistogram()
    holds = LatencyHistogram()
    for r in basis:
        jobs.merge(LatencyHistogram.from_dict(r["offload"]["job_ns"]))
        holds.merge(LatencyHistogram.from_dict(r["offload"]["hold_ns"]))
    waited = np.sum([r["offload"]["jobs_waited"] for r in basis], axis=0).tolist() if basis else [0] * WAITED_MAX
    return {"mode": mode, "description": DESCRIPTION[mode], **tot,
            "basis": "write-only runs" if write_only else "all runs",
            "jobs_waited_mean": round(b["jobs_waited_sum"] / b["released_replies"], 3) if b["released_replies"] else None,
            "jobs_waited": waited,
            "job_ms_p50": round(jobs.percentile(50) / 1e6, 3) if jobs.count else None,
            "job_ms_mean": round(jobs.sum_ns / jobs.count / 1e6, 3) if jobs.count else None,
            "hold_ms_p50": round(holds.percentile(50) / 1e6, 3) if holds.count else None,
            "sets_per_job_mean": round(b["released_after_write"] / b["jobs"], 2) if b["jobs"] else None,
            "not_emulated": "a read of a key written by a batch not yet durable is not held (#3381 holds it)"}
