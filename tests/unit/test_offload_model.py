"""The virtual offload's figures (analysis/offload.py) from the counters each run keeps: runs made
from per-reply waits and per-job lengths drawn at random, the truth computed from those lists
directly; what is tested is the merging across runs, the exclusion of other cells and of the
intervention's runs, and what an early-ack or plain recording gives (nothing)."""
import numpy as np
import pytest

from records import doc
from valkeytrace.analysis import offload
from valkeytrace.analysis.facts import offload_jobs
from valkeytrace.reporters.claims import say
from valkeytrace.histogram import LatencyHistogram

rng = np.random.default_rng(7)


def _run(waits, job_ms, workload="write-only", size=64, extra=0):
    """A run's counters as the shim keeps them, from each reply's jobs waited and each job's length."""
    waits = np.asarray(waits)
    hist = LatencyHistogram.from_values((np.asarray(job_ms) * 1e6).astype(np.uint64)).to_dict()
    return {"status": "ok", "workload": workload, "value_size": size, "fsync_extra_delay_ns": extra,
            "offload": {"jobs": len(job_ms), "released_replies": len(waits), "held_replies": len(waits),
                        "held_write_replies": len(waits), "jobs_waited_sum": int(waits.sum()),
                        "jobs_waited": np.bincount(np.minimum(waits, 7), minlength=8).tolist(),
                        "job_ns": hist, "hold_ns": hist, "early_replies": 0}}


def _doc(*runs, mode="durable"):
    return doc(list(runs), emulation={"offload": {"mode": mode, "gather_ns": 0}})


class Cell:
    workload, value_size = "write-only", 64


def test_a_cells_jobs_merge_its_runs_and_nothing_else():
    a_w, b_w = rng.choice([1, 2, 2, 2], 3000), rng.choice([1, 2], 2000)
    a_j, b_j = rng.normal(4.6, 0.2, 120), rng.normal(4.4, 0.2, 90)
    other = _run([5] * 100, [9.0] * 10, workload="read-heavy")
    wider = _run([5] * 100, [9.0] * 10, size=256)
    sensitivity = _run([5] * 100, [9.0] * 10, extra=2_000_000)
    doc = _doc(_run(a_w, a_j), _run(b_w, b_j), other, wider, sensitivity)
    j = offload.jobs(doc, "write-only", 64)
    waits, lens = np.concatenate([a_w, b_w]), np.concatenate([a_j, b_j])
    assert abs(j.jobs_waited_mean - waits.mean()) < 1e-9
    assert abs(j.job_ms_mean - lens.mean()) < 0.01 * lens.mean()  # the histogram's buckets: within 1%
    assert abs(j.sets_per_job - len(waits) / len(lens)) < 1e-9 and j.held_replies == len(waits)
    said = offload_jobs("v", doc, Cell())
    assert said.code == "durability.offload_jobs" and said.jobs_waited == j.jobs_waited_mean
    assert f"each SET waited {waits.mean():.1f} jobs" in say(said) and "two cohorts" in say(said)  # its words, once


def test_group_commit_reads_as_one_batch_per_round_trip():
    said = offload_jobs("v", _doc(_run([1] * 500, [4.5] * 10)), Cell())
    assert (said.jobs_waited, said.sets_per_job, said.job_ms) == (1.0, 50.0, pytest.approx(4.5, rel=0.01))
    assert "group commit" in say(said)


def test_nothing_outside_a_durable_virtual_offload():
    run = _run([2] * 100, [4.0] * 5)
    assert offload.jobs(doc([run]), "write-only", 64) is None and offload.summary(doc([run])) is None
    assert offload.jobs(_doc(run, mode="early-ack"), "write-only", 64) is None
    assert offload_jobs("v", _doc(run, mode="early-ack"), Cell()) is None


def test_the_summary_takes_a_set_from_the_write_only_runs_and_totals_from_all():
    w, r = _run([2] * 1000, [4.6] * 40), _run([1] * 300, [4.0] * 30, workload="read-heavy")
    s = offload.summary(_doc(w, r))
    assert s.basis == "write-only runs" and s.jobs_waited_mean == 2.0 and s.sets_per_job_mean == 25.0
    assert abs(s.job_ms_p50 - 4.6) < 0.05 and s.totals["held_replies"] == 1300
    assert s.to_json()["held_replies"] == 1300 and s.to_json()["jobs_waited_mean"] == 2.0
    assert offload.summary(_doc(r)).basis == "all runs"
