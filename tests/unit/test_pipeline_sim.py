"""The pipeline simulation against cases solved by hand: one client (every step of its cycle known),
one cohort under a gather window longer than any arrival spread, the cohorts that a window shorter
than the clients' turnaround leaves, and the main thread's path under appendfsync always."""
import os
import subprocess
import sys

import pytest

from valkeytrace.pipeline.params import (ClientCosts, Durability, Group, Interference, Jitter, Params, Sampler,
                                         ServerCosts)
from valkeytrace.pipeline.sim import simulate

F, A = 4000.0, 20.0                       # one fdatasync, one AOF write (µs)
CW, CR, SR, SW, WAKE = 6.0, 5.0, 4.0, 3.0, 10.0


def params(groups, mode="main", gather=0.0, sync=F, io_threads=1, **kw):
    return Params(groups=tuple(groups),
                  server=ServerCosts(read_us={"GET": SR, "SET": SR}, write_us=SW, wake_us=WAKE, deliver_us=SW,
                                     exec_us={"GET": 1.0, "SET": 1.0}, io_read_us=2.0, io_write_us=2.0),
                  client=ClientCosts(read_us=CR, write_us=CW, wake_us=WAKE),
                  durability=Durability(mode, Sampler((sync,)), Sampler((A,)), gather),
                  io_threads=io_threads, keyspace=1000, aof_bytes_per_write=100.0, duration_s=2.0, warmup_s=0.2,
                  **kw)


def test_one_client_always_every_step_of_its_cycle():
    r = simulate(params([Group("SET", 1)]))
    # written (CW) -> arrives -> the main thread wakes (WAKE) -> reads and executes (SR) -> beforeSleep:
    # AOF write (A) + fdatasync (F) -> its reply (SW) -> the client wakes (WAKE) -> reads it (CR)
    latency = WAKE + SR + A + F + SW + WAKE + CR
    o = r.ops["SET"]
    assert o.p50_us == pytest.approx(latency, abs=0.01) and o.p99_us == pytest.approx(latency, abs=0.01)
    # the next request is written by the client's next pass (CW): a cycle, one request a client
    assert o.tps == pytest.approx(1e6 / (latency + CW), rel=0.002)
    assert r.syncs_per_s == pytest.approx(o.tps, rel=0.01) and r.writes_per_sync == pytest.approx(1.0)


def test_one_client_under_the_durable_offload_waits_for_its_job():
    r = simulate(params([Group("SET", 1)], mode="durable"))
    # the main thread queues the AOF bytes after its write (A) and holds the reply (half a reply's
    # cost to copy it aside); the job (A + F) starts at once; the offload thread writes the reply (SW)
    latency = WAKE + SR + A + SW / 2
    latency = (latency - SW / 2) + (A + F) + SW + WAKE + CR
    assert r.ops["SET"].p50_us == pytest.approx(latency, abs=0.01)


def test_gets_never_wait_for_an_offload_job_but_sets_do():
    r = simulate(params([Group("GET", 4), Group("SET", 2, measured=False)], mode="durable"))
    assert r.ops["GET"].p99_us < 200  # a few iterations, no fdatasync
    assert r.background["SET"].p50_us > F


@pytest.mark.parametrize("clients", [8, 40])
def test_a_window_longer_than_any_spread_makes_one_cohort(clients):
    """Every write client's write rides one job: the window starts at the previous job's end, the
    clients released then are back within (WAKE + a pass: clients x (CR + CW)), far inside W; a job
    a cycle, and each SET waits the window's rest plus the job."""
    w = 2000.0
    r = simulate(params([Group("SET", clients)], mode="durable", gather=w))
    assert r.writes_per_sync == pytest.approx(clients, rel=0.02)
    cycle = w + A + F + clients * SW + WAKE  # window, job, the replies written, the main thread's wake
    assert r.ops["SET"].tps == pytest.approx(clients * 1e6 / cycle, rel=0.03)
    spread = WAKE + clients * (CR + CW) + WAKE + clients * SR
    assert w + A + F - spread <= r.ops["SET"].p50_us <= w + A + F + clients * SW + 2 * WAKE + clients * CR


def test_without_a_window_the_released_clients_form_a_second_cohort():
    """No window: while a job runs, the clients it will release are queued for the next one; those
    released come back during it and wait for the one after: two cohorts, each SET two jobs."""
    r = simulate(params([Group("SET", 40)], mode="durable"))
    assert r.writes_per_sync == pytest.approx(20, rel=0.1)
    assert 1.8 * F <= r.ops["SET"].p50_us <= 2.1 * (F + A)


def test_a_window_shorter_than_the_turnaround_keeps_two_cohorts():
    # the clients come back WAKE + 40 x (CR + CW) = ~450 µs after a release: a 100 µs window is gone by then
    r = simulate(params([Group("SET", 40)], mode="durable", gather=100.0))
    assert r.writes_per_sync == pytest.approx(20, rel=0.15)


def test_always_gets_wait_for_the_fsync_in_flight_and_their_own():
    """GET c=N with a steady SET load under always: a GET arriving during an fsync waits it out, is
    read in the next iteration, whose own fdatasync (a SET rides in every iteration here) comes
    before its reply: between one and two fsyncs."""
    r = simulate(params([Group("GET", 20), Group("SET", 8, measured=False)]))
    assert F <= r.ops["GET"].p50_us <= 2 * (F + A) + 200


def test_a_slower_disk_moves_the_always_latency_by_its_cycles():
    fast = simulate(params([Group("SET", 20)], sync=2000.0)).ops["SET"].p50_us
    slow = simulate(params([Group("SET", 20)], sync=6000.0)).ops["SET"].p50_us
    assert (slow - fast) / 4000.0 == pytest.approx(2.0, abs=0.2)  # two cohorts: two fsyncs a SET


def test_io_threads_hop_reads_and_writes_on_the_io_thread():
    one = simulate(params([Group("SET", 1)])).ops["SET"].p50_us
    two = simulate(params([Group("SET", 1)], io_threads=2)).ops["SET"].p50_us
    # read by the I/O thread (2) instead of the main (SR), executed (1), the reply written there (2)
    assert two == pytest.approx(one - SR - SW + 2.0 + 1.0 + 2.0, abs=0.5)


def test_interference_stalls_take_their_share_of_a_busy_cpu():
    quiet = simulate(params([Group("GET", 50)]))
    stalls = Interference(200.0, Sampler((250.0,)))
    noisy = simulate(params([Group("GET", 50)], interference=stalls, client_interference=stalls))
    # 200 stalls/s of 250 µs: 5% of each CPU; the clients' CPU is the bottleneck here
    assert noisy.ops["GET"].tps == pytest.approx(quiet.ops["GET"].tps * 0.95, rel=0.03)
    assert noisy.ops["GET"].p99_us > quiet.ops["GET"].p99_us + 150


def test_the_simulation_is_a_function_of_its_seed():
    p = params([Group("GET", 10), Group("SET", 4, measured=False)], mode="durable",
               interference=Interference(100.0, Sampler((50.0, 400.0))), jitter=Jitter(0.01, 300.0))
    a, b = simulate(p, seed=3), simulate(p, seed=3)
    assert a.ops["GET"].p99_us == b.ops["GET"].p99_us and a.events == b.events


def test_open_loop_below_capacity_every_step_of_a_request():
    """GETs due every 1 ms (uniform), one at a time, nothing written: each one's latency is its own
    path (sent: CW, the main thread wakes, reads it, answers it; the client wakes and reads it), from
    the moment it was due; the rate achieved is the one offered."""
    r = simulate(params([Group("GET", 1, rate=1000.0, arrival="uniform")]))
    o = r.ops["GET"]
    assert o.p50_us == pytest.approx(CW + WAKE + SR + SW + WAKE + CR, abs=0.01)
    assert o.open.achieved_rate == pytest.approx(1000.0, rel=0.002) and not o.open.saturated
    assert o.open.service_p50_us == pytest.approx(o.p50_us - CW, abs=0.01)  # from the send, not the due moment


def test_open_loop_past_the_servers_capacity_is_saturated():
    """A GET costs the main thread 200 µs (at most 5,000/s): at 8,000/s offered the queue grows
    through the window, the achieved rate is the server's, not the offered one, and the latency
    from the due moment grows with the window (a closed loop would show a steady one)."""
    p = params([Group("GET", 1, rate=8000.0)])
    p = Params(**{**p.__dict__, "server": ServerCosts(read_us={"GET": 200.0}, write_us=SW, wake_us=WAKE),
                  "drain_s": 0.0})
    o = simulate(p).ops["GET"]
    assert o.open.saturated and o.open.offered_rate == pytest.approx(8000, rel=0.03)
    # at most the server's 4,926/s (200 + 3 µs a GET) are answered, less the backlog the warm-up left
    # and the batch still being read at the window's end (every request arrived is read before any reply)
    assert o.open.achieved_rate < 1e6 / (200.0 + SW)
    assert o.p99_us > 0.5e6  # the backlog at the window's end: its requests waited most of a second


def test_open_loop_under_always_waits_for_the_fsync_cycle_in_flight():
    """GETs at 500/s under one closed-loop SET client whose every write the main thread fdatasyncs (4 ms):
    the main thread is in an fsync nearly all the time; a GET due at a random moment waits for the rest
    of it (half a cycle on the median), then is answered by the next iteration, which has no write in
    it (the SET client's next write comes a round trip after its reply, after the GETs read in the
    same poll): never more than a cycle and a few passes."""
    r = simulate(params([Group("GET", 1, rate=500.0, pool="grow"), Group("SET", 1, measured=False)]))
    cycle = A + F  # the main thread's iteration with a write in it
    o = r.ops["GET"]
    assert o.p50_us == pytest.approx(cycle / 2, rel=0.1)
    assert o.p99_us < cycle + 100


def test_a_fixed_pool_under_always_saturates_at_its_connections_per_cycle():
    """GETs due at 20,000/s over a fixed pool of 10 connections (one in flight each), beside a SET client
    whose every write costs a 4 ms fdatasync: a connection gets a GET answered once per iteration, and
    at most every other iteration goes without an fsync, so the pool is answered at most 10 per 2 ms and at
    least 10 per two cycles: saturated, the rest waiting in the client, the latency from their due
    moment growing through the window. Its achieved rate is the pool's over its mean service time
    (Little's law: all 10 busy throughout). The same rate with a pool that grows is answered in full:
    every GET due in a cycle is read in the next."""
    from valkeytrace.pipeline.sim import _Sim

    sim = _Sim(params([Group("GET", 10, rate=20000.0), Group("SET", 1, measured=False)]), 1)
    o = sim.run().ops["GET"]
    assert o.open.saturated and 10 / (2 * (A + F)) * 1e6 < o.open.achieved_rate <= 10 / (F / 2) * 1e6, o.open
    mean_service = sum(sim.clients[0].service) / len(sim.clients[0].service)
    assert o.open.achieved_rate == pytest.approx(10 / mean_service * 1e6, rel=0.05)
    assert o.p99_us > 0.3e6, o.p99_us
    grown = simulate(params([Group("GET", 10, rate=20000.0, pool="grow"), Group("SET", 1, measured=False)])).ops["GET"]
    assert not grown.open.saturated and grown.p99_us < 3 * (A + F), grown.open


def test_windows_side_by_side_are_the_serial_ones_even_from_a_script_on_stdin():
    """pipeline/pool.simulate_many spawns its workers, which import the caller's main module: a script read
    from stdin has none to import, and its windows are simulated in its own process instead, the same ones."""
    script = "\n".join([
        "from valkeytrace.pipeline.params import *",
        "from valkeytrace.pipeline.pool import simulate_many",
        "from valkeytrace.pipeline.sim import simulate",
        "p = Params(groups=(Group('GET', 4), Group('SET', 2, measured=False)),",
        "           server=ServerCosts(read_us={'GET': 4.0, 'SET': 4.0}, write_us=3.0, wake_us=10.0, deliver_us=3.0),",
        "           client=ClientCosts(read_us=5.0, write_us=6.0, wake_us=10.0),",
        "           durability=Durability('durable', Sampler((400.0,)), Sampler((20.0,))), keyspace=50,",
        "           duration_s=0.2, warmup_s=0.05)",
        "many = simulate_many([(p, 1), (p, 2)])",
        "one = [simulate(p, 1), simulate(p, 2)]",
        "print([m.ops['GET'].p99_us for m in many] == [o.ops['GET'].p99_us for o in one] and many[0].events > 0)",
    ])
    res = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "VALKEYTRACE_SIM_WORKERS": "2"})
    assert res.returncode == 0 and res.stdout.strip() == "True", res.stderr[-2000:]
