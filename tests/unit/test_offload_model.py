"""The durable offload's figures with known answers: the jobs a SET waited (two cohorts: 2 jobs;
group commit: 1), the job length from its histogram, SETs per job, and the recording's summary
taken from the write-only runs."""
import numpy as np

from valkeytrace.analysis.facts import offload_jobs, offload_sentence
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.tracers import offload


class Cell:
    workload, value_size = "write-only", 64


def _run(waited: float, jobs=100, job_ms=4.6, sets=2500, workload="write-only"):
    hist = LatencyHistogram.from_values(np.full(jobs, int(job_ms * 1e6), dtype=np.uint64)).to_dict()
    figures = {c: 0 for c in offload.COUNTERS}
    figures.update(jobs=jobs, released_replies=sets, held_write_replies=sets, held_replies=sets,
                   jobs_waited_sum=int(waited * sets))
    figures.update(jobs_waited=[0, int(sets * (2 - waited)), int(sets * (waited - 1)), 0, 0, 0, 0, 0],
                   job_ns=hist, hold_ns=hist)
    return {"status": "ok", "workload": workload, "value_size": 64, "offload": figures}


def _doc(*runs):
    return {"emulation": {"offload": {"mode": "durable"}}, "runs": list(runs)}


def test_two_cohorts_wait_two_jobs():
    j = offload_jobs(_doc(_run(2.0)), Cell())
    assert j["jobs_waited_mean"] == 2.0 and abs(j["job_ms_mean"] - 4.6) < 0.05 and j["sets_per_job"] == 25
    assert abs(j["wait_us"] - 9200) < 100
    s = offload_sentence("v", _doc(_run(2.0)), Cell())
    assert "each SET waited 2.0 jobs of 4.60 ms" in s and "two cohorts" in s and "vt_offload" in s


def test_group_commit_waits_one_job():
    s = offload_sentence("v", _doc(_run(1.0)), Cell())
    assert "each SET waited 1.0 jobs" in s and "group commit" in s


def test_no_figures_outside_a_durable_virtual_offload():
    assert offload_jobs({"runs": [_run(2.0)]}, Cell()) is None  # not a virtual offload recording
    early = {"emulation": {"offload": {"mode": "early-ack"}}, "runs": [_run(2.0)]}
    assert offload_jobs(early, Cell()) is None and offload_sentence("v", early, Cell()) == ""


def test_the_summary_is_the_write_only_runs():
    s = offload.summary("durable", [_run(2.0), _run(1.0, workload="read-heavy")])
    assert s["basis"] == "write-only runs" and s["jobs_waited_mean"] == 2.0
    assert abs(s["job_ms_p50"] - 4.6) < 0.05 and s["sets_per_job_mean"] == 25
    assert s["held_replies"] == 5000  # totals over every run
    assert offload.summary("durable", [_run(1.0, workload="read-heavy")])["basis"] == "all runs"
