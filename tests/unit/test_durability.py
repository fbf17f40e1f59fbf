"""The durability record (analysis/durability.py) against a simulation that knows the answer:
closed-loop clients writing to a server whose durability thread runs one job at a time (it takes
every write that arrived, optionally only once a gather window has passed since the first), each
reply sent when its job ends. The simulation emits what the probe would (the arrival, read and
reply of each request; each job's AOF write and fdatasync) and counts, for each write, the jobs
that ended while it waited; the analysis sees only the events."""
import random

import numpy as np
import pytest

from valkeytrace.analysis.durability import durability, run_durability


def simulate(clients=50, job_us=4000, turnaround_us=(30, 230), gather_us=0, seconds=2.0, thread="vt_offload", seed=1,
             start_spread_us=500):
    rng = random.Random(seed)
    ev, req = [], []  # timeline rows; (offset, conn, event, tid)
    tid = 200 if thread != "main" else 100
    arrive = sorted((rng.uniform(0, start_spread_us), c) for c in range(clients))
    pending, t, end_s = list(arrive), 0.0, seconds * 1e6
    waited, job_ends, busy_until, residence = [], [], 0.0, []
    waiting = []  # (arrival, conn)
    while t < end_s:
        # next job: after the previous ended, once a write is there (and the gather window passed)
        pending.sort()
        if not waiting and not pending:
            break
        while pending and pending[0][0] <= busy_until:
            waiting.append(pending.pop(0))
        if not waiting:
            waiting.append(pending.pop(0))
        first = min(a for a, _ in waiting)
        start = max(busy_until, first) + gather_us  # csrc/offload.c: W after the later of the two
        while pending and pending[0][0] <= start:
            waiting.append(pending.pop(0))
        end = start + job_us
        ev.append([int(start * 1e3), 20_000, tid, "aof_write", "call"])
        ev.append([int((start + 20) * 1e3), int((job_us - 20) * 1e3), tid, "fdatasync", "call"])
        for a, c in waiting:
            waited.append(sum(1 for e in job_ends if e > a) + 1)  # jobs that ended while it waited, its own
            residence.append(end + 10 - a)
            req += [(a, c, 0, 0), (a + 5, c, 1, 100), (end + 10, c, 2, tid)]
            pending.append((end + 10 + rng.uniform(*turnaround_us), c))
        job_ends.append(end)
        waiting, busy_until, t = [], end, end
    req.sort()
    cols = {"events": ["arrive", "recv", "send"], "offset_ns": [int(r[0] * 1e3) for r in req],
            "conn": [r[1] for r in req], "event": [r[2] for r in req], "tid": [r[3] for r in req]}
    threads = [{"tid": 100, "name": "valkey-server", "role": "main", "calls": {}},
               {"tid": tid, "name": thread, "role": thread, "calls": {"fdatasync": hist(len(job_ends))}}]
    server = {"window_ns": int(job_ends[-1] * 1e3) + 1, "threads": threads, "requests": cols,
              "blocked_timeline": {"events": ev}, "truth_residence_us": residence}  # (a key the model drops)
    return server, float(np.mean(waited)), len(job_ends)


def hist(n: int) -> dict:
    """A histogram record of n calls (their lengths do not matter here)."""
    return {"count": n, "sum_ns": n, "min_ns": 1, "max_ns": 1, "buckets": [[1, n]] if n else []}


def test_two_cohorts_wait_two_jobs_and_are_counted():
    server, truth, jobs = simulate()
    d = run_durability(server)
    assert d.thread == "vt_offload" and d.jobs == jobs
    assert abs(d.jobs_waited_per_write - truth) < 0.02 and 1.8 < truth < 2.1
    assert d.cohorts == 2 and abs(d.writes_per_job - 25) < 2
    assert abs(d.job_ms_p50 - 4.0) < 0.01
    assert 100 <= d.arrival_spread_us <= 200  # turnarounds spread over 200 µs, half a cohort each
    # each write's time in the server, from its arrival to its reply: the median of the simulation's own
    assert d.residence_p50_us == pytest.approx(float(np.median(server["truth_residence_us"])), abs=0.01)
    assert 4000 < d.residence_p50_us < 2 * 4000 + 1000  # between one job and two
    # each reply leaves 10 µs after its job's end; it waited from its read (5 µs after arriving) to that end
    assert d.release_hop_p50_us == pytest.approx(10, abs=0.01)
    assert 3000 < d.durable_wait_p50_us < 8000


def test_replies_that_wait_for_no_sync_have_no_durable_hop():
    """everysec: a sync a second on bio_aof, each write answered 50 µs after it arrives; the last sync before
    a reply ended up to a second earlier, which is no hop of the reply's (it was 288 ms in a compare once)."""
    req, ev = [], []
    for i in range(20_000):  # 2 s of writes on 10 connections, one every 100 µs
        a = i * 100.0
        req += [(a, i % 10, 0, 0), (a + 5, i % 10, 1, 100), (a + 50, i % 10, 2, 100)]
    for s_us in (300_000.0, 1_300_000.0):
        ev.append([int(s_us * 1e3), 20_000, 200, "aof_write", "call"])
        ev.append([int((s_us + 20) * 1e3), 5_000_000, 200, "fdatasync", "call"])
    cols = {"events": ["arrive", "recv", "send"], "offset_ns": [int(r[0] * 1e3) for r in req],
            "conn": [r[1] for r in req], "event": [r[2] for r in req], "tid": [r[3] for r in req]}
    threads = [{"tid": 100, "name": "valkey-server", "role": "main", "calls": {}},
               {"tid": 200, "name": "bio_aof", "role": "bio_aof", "calls": {"fdatasync": hist(2)}}]
    d = run_durability({"window_ns": 2_000_000_000, "threads": threads, "requests": cols,
                        "blocked_timeline": {"events": ev}})
    assert d.thread == "bio_aof" and d.jobs == 2 and d.jobs_waited_per_write < 0.01
    assert d.residence_p50_us == pytest.approx(50, abs=0.01)
    assert d.release_hop_p50_us is None and d.durable_wait_p50_us is None


@pytest.mark.parametrize("gather_us", [300, 1000])
def test_a_gather_window_wider_than_the_spread_keeps_one_cohort(gather_us):
    """Clients that start within the window ride one job each round from then on."""
    server, truth, _ = simulate(gather_us=gather_us, start_spread_us=100)
    d = run_durability(server)
    assert d.cohorts == 1 and abs(d.jobs_waited_per_write - truth) < 0.02 and truth < 1.1
    assert abs(d.job_ms_p50 - 4.0) < 0.01  # the job is the write + fdatasync; the window is not in it
    assert d.arrival_delay_us == pytest.approx(40, abs=15)  # the fastest turnaround after a release


def test_split_cohorts_merge_once_the_window_covers_the_clients_return():
    """Clients that start far apart (two cohorts at first) ride one job once the window, counted
    from the later of a job's first write and the previous job's end, covers their turnaround
    (30-230 µs here); a window shorter than that leaves them split, as the truth is."""
    merged, truth, _ = simulate(gather_us=300, start_spread_us=2000)
    d = run_durability(merged)
    assert d.cohorts == 1 and abs(d.jobs_waited_per_write - truth) < 0.02 and truth < 1.1
    split, truth, _ = simulate(gather_us=20, start_spread_us=2000)
    d = run_durability(split)
    assert d.cohorts == 2 and abs(d.jobs_waited_per_write - truth) < 0.02 and truth > 1.8


def test_the_main_thread_baseline_is_the_same_record():
    server, truth, _ = simulate(thread="main")
    server["threads"] = [{"tid": 100, "name": "valkey-server", "role": "main",
                          "calls": {"fdatasync": hist(5)}}]
    for row in server["blocked_timeline"]["events"]:
        row[2] = 100
    d = run_durability(server)
    assert d.thread == "main" and abs(d.jobs_waited_per_write - truth) < 0.02


def test_no_requests_gives_the_jobs_only_and_cells_combine_repeats():
    server, truth, jobs = simulate(seconds=1.0)
    bare = dict(server, requests=None)
    d = run_durability(bare)
    assert d.jobs == jobs and d.jobs_waited_per_write is None and d.cohorts is None
    a, _, _ = simulate(seed=2)
    b, _, _ = simulate(seed=3, gather_us=1000)
    cell = durability([a, b, None])
    assert cell.windows == 2 and 1.0 < cell.jobs_waited_per_write < 2.0
    assert durability([]) is None and run_durability({"window_ns": 1, "threads": []}) is None

