"""The virtual offload's figures (record --emulate-offload), computed when a report is made from
the counters each run keeps (runs[].offload: what the shim counted over the run's window): the
recording holds counters, the means and percentiles are derived here, once.

- jobs(doc, workload, size): what a cell's SETs waited for (the jobs each reply waited, their
  length, SETs a job);
- summary(doc): the recording-wide figures a report's JSON shows as runs[].emulation.offload
  (the totals over every run; what a SET waited for from the write-only runs, when there are any).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from valkeytrace.histogram import LatencyHistogram


@dataclass
class OffloadJobs:
    jobs_waited_mean: float
    job_ms_mean: float | None
    job_ms_p50: float | None
    sets_per_job: float
    held_replies: int
    wait_us: float | None


@dataclass
class OffloadSummary:
    mode: str
    gather_ns: int = 0
    basis: str = "all runs"          # where the per-SET figures come from: "write-only runs" when any
    totals: dict = field(default_factory=dict)  # every counter summed over the measured runs
    jobs_waited_mean: float | None = None
    jobs_waited: list = field(default_factory=list)
    job_ms_p50: float | None = None
    job_ms_mean: float | None = None
    hold_ms_p50: float | None = None
    hold_read_ms_p50: float | None = None
    sets_per_job_mean: float | None = None

    def to_json(self) -> dict:
        """Flat, as recordings before 2026-12-02 kept it: the totals beside the derived figures."""
        d = dataclasses.asdict(self)
        return {**d.pop("totals"), **d}


def mode(doc: dict) -> str | None:
    """'durable' or 'early-ack' for a virtual offload recording, else None."""
    return (((doc.get("emulation") or {}).get("offload")) or {}).get("mode")


def _counters(runs: list[dict]) -> dict:
    out: dict[str, int] = {}
    for r in runs:
        for k, v in r["offload"].items():
            if isinstance(v, int) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


def _sets_held(c: dict) -> int:
    return c.get("held_write_replies", c.get("released_after_write", 0))  # before 2026-12-02: released_after_write


def _hist(runs: list[dict], key: str) -> LatencyHistogram:
    return LatencyHistogram.merged(LatencyHistogram.from_dict(r["offload"][key]) for r in runs if r["offload"].get(key))


def _measured(doc: dict) -> list[dict]:
    return [r for r in doc.get("runs", []) if r.get("status") == "ok" and r.get("offload")]


def jobs(doc: dict, workload: str, size: int) -> OffloadJobs | None:
    """A durable virtual offload's jobs as a cell's replies met them, or None."""
    if mode(doc) != "durable":
        return None
    runs = [r for r in _measured(doc) if r["workload"] == workload and r["value_size"] == size
            and not r.get("fsync_extra_delay_ns")]
    c = _counters(runs)
    if not c.get("released_replies") or not c.get("jobs"):
        return None
    h = _hist(runs, "job_ns")
    waited = c.get("jobs_waited_sum", 0) / c["released_replies"]
    job_ms = h.sum_ns / h.count / 1e6 if h.count else None
    return OffloadJobs(jobs_waited_mean=waited, job_ms_mean=job_ms,
                       job_ms_p50=h.percentile(50) / 1e6 if h.count else None,
                       sets_per_job=_sets_held(c) / c["jobs"], held_replies=c.get("held_replies", 0),
                       wait_us=waited * job_ms * 1000 if job_ms else None)


def summary(doc: dict) -> OffloadSummary | None:
    m = mode(doc)
    if not m:
        return None
    measured = _measured(doc)
    write_only = [r for r in measured if r["workload"] == "write-only"]
    basis = write_only or measured
    b = _counters(basis)
    j, holds, reads = _hist(basis, "job_ns"), _hist(basis, "hold_ns"), _hist(measured, "hold_read_ns")
    waited = (np.sum([r["offload"]["jobs_waited"] for r in basis], axis=0).tolist() if basis else [])
    return OffloadSummary(
        mode=m, gather_ns=((doc.get("emulation") or {}).get("offload") or {}).get("gather_ns") or 0,
        basis="write-only runs" if write_only else "all runs", totals=_counters(measured),
        jobs_waited_mean=round(b["jobs_waited_sum"] / b["released_replies"], 3) if b.get("released_replies") else None,
        jobs_waited=waited,
        job_ms_p50=round(j.percentile(50) / 1e6, 3) if j.count else None,
        job_ms_mean=round(j.sum_ns / j.count / 1e6, 3) if j.count else None,
        hold_ms_p50=round(holds.percentile(50) / 1e6, 3) if holds.count else None,
        hold_read_ms_p50=round(reads.percentile(50) / 1e6, 3) if reads.count else None,
        sets_per_job_mean=round(_sets_held(b) / b["jobs"], 2) if b.get("jobs") else None)


def exit_warnings(doc: dict) -> list[str]:
    """What the emulation did at the edges: clients closed over their output-buffer limit (held replies
    counted as the server counts its buffer), and replies still held when the server ended."""
    out = []
    closed = sum((r.get("offload") or {}).get("obuf_closed", 0) for r in _measured(doc))
    at_exit = (((doc.get("emulation") or {}).get("offload") or {}).get("at_exit")) or {}
    closed = max(closed, at_exit.get("obuf_closed") or 0)
    if closed:
        out.append(f"virtual offload: {closed} client(s) closed over their client-output-buffer-limit (the replies "
                   "held for them counted against it, as the server counts its own buffer)")
    if at_exit.get("held_replies_dropped"):
        out.append(f"virtual offload: {at_exit['held_replies_dropped']} held replies were still held when the server "
                   "ended (never written: their connections closed with it)")
    return out
