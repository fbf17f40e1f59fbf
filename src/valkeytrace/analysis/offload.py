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
from valkeytrace.analysis.note import Note
from valkeytrace.recording.model import AtExit, Document, Run, decode


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
    design: str = "bio-write"        # record --offload-design
    basis: str = "all runs"          # where the per-SET figures come from: "write-only runs" when any
    totals: dict = field(default_factory=dict)  # every counter summed over the measured runs
    jobs_waited_mean: float | None = None
    jobs_waited: list = field(default_factory=list)
    job_ms_p50: float | None = None
    job_ms_mean: float | None = None
    hold_ms_p50: float | None = None
    hold_read_ms_p50: float | None = None
    sets_per_job_mean: float | None = None
    handoff_wait_ms: float | None = None         # bio-write-block: the hand-offs' waits, together
    longest_postponement_ms: float | None = None  # main-write: the longest a write was postponed
    longest_main_write_ms: float | None = None    # main-write: the main thread's longest write (a wait included)

    def to_json(self) -> dict:
        """Flat, as recordings before 2026-12-02 kept it: the totals beside the derived figures."""
        d = dataclasses.asdict(self)
        totals = d.pop("totals")
        return {**totals, **d}


def mode(doc) -> str | None:
    """'durable' or 'early-ack' for a virtual offload recording, else None."""
    off = decode(doc).emulation.offload
    return off.mode if off else None


@dataclass
class Counters:
    """The shim's counters summed over runs (runs[].offload), those read by name typed."""
    totals: dict                  # every integer counter, by name
    released_replies: int = 0
    jobs: int = 0
    jobs_waited_sum: int = 0
    held_replies: int = 0
    sets_held: int = 0            # held_write_replies (before 2026-12-02: released_after_write)
    obuf_closed: int = 0
    handoff_wait_ns: int = 0      # bio-write-block's waits

    @classmethod
    def of(cls, runs: list[Run]) -> "Counters":
        out: dict[str, int] = {}
        for r in runs:
            for k, v in (r.offload or {}).items():
                if isinstance(v, int) and not isinstance(v, bool):
                    out[k] = out.get(k, 0) + v
        named = {f: out.get(f, 0) for f in ("released_replies", "jobs", "jobs_waited_sum", "held_replies", "obuf_closed",
                                            "handoff_wait_ns")}
        return cls(out, sets_held=out.get(HELD_WRITES, out.get(HELD_WRITES_BEFORE, 0)), **named)


HELD_WRITES, HELD_WRITES_BEFORE = "held_write_replies", "released_after_write"


def _hist(runs: list[Run], key: str) -> LatencyHistogram:
    return LatencyHistogram.merged(LatencyHistogram.from_dict((r.offload or {})[key]) for r in runs
                                   if (r.offload or {}).get(key))


def _measured(doc: Document) -> list[Run]:
    return [r for r in doc.runs if r.status == "ok" and r.offload]


def jobs(doc, workload: str, size: int) -> OffloadJobs | None:
    """A durable virtual offload's jobs as a cell's replies met them, or None."""
    doc = decode(doc)
    if mode(doc) != "durable":
        return None
    runs = [r for r in _measured(doc) if r.workload == workload and r.value_size == size and not r.fsync_extra_delay_ns]
    c = Counters.of(runs)
    if not c.released_replies or not c.jobs:
        return None
    h = _hist(runs, "job_ns")
    waited = c.jobs_waited_sum / c.released_replies
    job_ms = h.sum_ns / h.count / 1e6 if h.count else None
    return OffloadJobs(jobs_waited_mean=waited, job_ms_mean=job_ms,
                       job_ms_p50=h.percentile(50) / 1e6 if h.count else None,
                       sets_per_job=c.sets_held / c.jobs, held_replies=c.held_replies,
                       wait_us=waited * job_ms * 1000 if job_ms else None)


def summary(doc) -> OffloadSummary | None:
    doc = decode(doc)
    m = mode(doc)
    if not m:
        return None
    measured = _measured(doc)
    write_only = [r for r in measured if r.workload == "write-only"]
    basis = write_only or measured
    b = Counters.of(basis)
    j, holds, reads = _hist(basis, "job_ns"), _hist(basis, "hold_ns"), _hist(measured, "hold_read_ns")
    post, c, mw = _hist(measured, "postpone_ns"), Counters.of(measured), _hist(measured, "main_write_ns")
    waited = (np.sum([(r.offload or {})[JOBS_WAITED] for r in basis], axis=0).tolist() if basis else [])
    off = doc.emulation.offload
    return OffloadSummary(
        mode=m, gather_ns=int((off.gather_ns if off else 0) or 0), design=(off.design if off else None) or "bio-write",
        basis="write-only runs" if write_only else "all runs", totals=c.totals,
        handoff_wait_ms=round(c.handoff_wait_ns / 1e6, 3) if c.handoff_wait_ns else (0.0 if c.totals else None),
        longest_postponement_ms=round(post.max_ns / 1e6, 3) if post.count else None,
        longest_main_write_ms=round(mw.max_ns / 1e6, 3) if mw.count else None,
        jobs_waited_mean=round(b.jobs_waited_sum / b.released_replies, 3) if b.released_replies else None,
        jobs_waited=waited,
        job_ms_p50=round(j.percentile(50) / 1e6, 3) if j.count else None,
        job_ms_mean=round(j.sum_ns / j.count / 1e6, 3) if j.count else None,
        hold_ms_p50=round(holds.percentile(50) / 1e6, 3) if holds.count else None,
        hold_read_ms_p50=round(reads.percentile(50) / 1e6, 3) if reads.count else None,
        sets_per_job_mean=round(b.sets_held / b.jobs, 2) if b.jobs else None)


JOBS_WAITED = "jobs_waited"  # the shim's histogram of jobs waited per reply (a list by count)


def exit_warnings(doc) -> list[Note]:
    """What the emulation did at the edges: clients closed over their output-buffer limit (held replies
    counted as the server counts its buffer), and replies still held when the server ended."""
    doc = decode(doc)
    out = []
    at_exit = doc.emulation.offload.at_exit if doc.emulation.offload else AtExit()
    closed = max(Counters.of(_measured(doc)).obuf_closed, at_exit.obuf_closed)
    if closed:
        out.append(Note("obuf_closed", {"clients": closed}))
    if at_exit.held_replies_dropped:
        out.append(Note("held_dropped", {"replies": at_exit.held_replies_dropped}))
    return out
