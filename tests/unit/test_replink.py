"""The replication link's joins (analysis/replink.py) against a simulated primary and replica whose
every moment is known: the offsets joined with bytes in flight at the windows' start, the replica's
clock offset recovered from the exchange within its error, each part of a probe's WAITAOF, the lag,
and the cap's witness counting only what left before its sync had ended."""
import numpy as np
import pytest

from valkeytrace.analysis import replink, replication

US = 1000
PERIOD = 10_000 * US


def _server(start, events, calls):
    """A window (start_mono_ns on its own clock) from (t, conn, ev, bytes) and (start, dur, cause)."""
    events = sorted(events)
    return {"start_mono_ns": start, "window_ns": 10**12,
            "requests": {"offset_ns": [t - start for t, *_ in events], "conn": [c for _, c, _, _ in events],
                         "event": [e for _, _, e, _ in events], "tid": [1] * len(events),
                         "bytes": [b for *_, b in events]},
            "blocked_timeline": {"events": [[s - start, d, 1, cause, "call"] for s, d, cause in calls]}}


def simulate(k=40, theta=0, link_at=2150 * US, in_flight=50):
    """k probes, one every 10 ms. Primary (its clock): the probe's SET arrives and is read at T, its
    AOF write at T+100 µs, the sync T+120 -> T+2120 µs, the stream written at T+link_at, the SET's
    reply at T+2200 µs, the WAITAOF read at T+2300 µs, the replica's ack read at T+3420 µs, the
    WAITAOF answered at T+3500 µs. Replica (true time + theta): the stream arrives 1 µs before the
    primary's write returns and is read 10 µs after it, its AOF write 150 µs after the write, its
    sync 10 µs later for 1 ms, its ack written 90 µs after the sync, read by the primary 20 µs later."""
    p_ev, p_calls, r_ev, r_calls = [], [], [], []
    # bytes the replica reads at its window's start that the primary sent before its own window
    r_ev.append((theta + 10 * US, 0, 1, in_flight))
    truth = []
    for i in range(k):
        t = (i + 1) * PERIOD
        p_ev += [(t, 1, 0, 0), (t, 1, 1, 40)]
        p_calls += [(t + 100 * US, 10 * US, "aof_write"), (t + 120 * US, 2000 * US, "fdatasync")]
        s = t + link_at
        p_ev += [(s, 0, 2, 100), (t + 2200 * US, 1, 2, 5), (t + 2300 * US, 1, 1, 36)]
        arrive, read = s - 1 * US, s + 10 * US
        aof = max(read, s) + 150 * US
        sync_end = aof + 10 * US + 1000 * US
        ack = sync_end + 90 * US
        ack_read = ack + 20 * US
        reply = max(ack_read + 80 * US, t + 2400 * US)
        p_ev += [(ack_read, 0, 1, 30), (reply, 1, 2, 12)]
        r_ev += [(arrive + theta, 0, 0, 0), (read + theta, 0, 1, 100), (ack + theta, 0, 2, 30)]
        r_calls += [(aof + theta, 10 * US, "aof_write"), (aof + 10 * US + theta, 1000 * US, "fdatasync")]
        truth.append({"p0": t, "p1": t + 2120 * US, "arrive": arrive, "aof": aof, "sync_end": sync_end,
                      "ack": ack, "ack_read": ack_read, "reply": reply})
    return _server(0, p_ev, p_calls), _server(theta, r_ev, r_calls), truth


def test_offsets_joined_with_bytes_in_flight_and_the_parts_of_each_probe():
    p, r, truth = simulate()
    lk = replink.link(replink.node_events(p), replink.node_events(r))
    assert lk is not None and lk.joined and lk.early == 0 and lk.undecomposed == 0
    assert len(lk.chains) == len(truth)
    t0 = truth[0]
    parts = replink.components(lk.chains[0][1])
    want = {"primary_durability_us": (t0["p1"] - t0["p0"]) / US, "link_us": (t0["arrive"] - t0["p1"]) / US,
            "replica_apply_us": (t0["aof"] - t0["arrive"]) / US, "replica_aof_us": (t0["sync_end"] - t0["aof"]) / US,
            "replica_ack_us": (t0["ack"] - t0["sync_end"]) / US, "ack_read_us": (t0["ack_read"] - t0["ack"]) / US,
            "primary_reply_us": (t0["reply"] - t0["ack_read"]) / US}
    assert parts == pytest.approx(want)
    assert sum(parts.values()) == pytest.approx((t0["reply"] - t0["p0"]) / US)
    # the lag: read by the primary -> the stream's arrival on the replica
    assert np.allclose(lk.lag_ns, 2149 * US) and np.allclose(lk.lag_after_durable_ns, 29 * US)


def test_the_witness_counts_a_stream_that_left_before_its_sync_ended():
    p, r, _ = simulate(link_at=1000 * US)  # written mid-sync (T+120 -> T+2120 µs): early-ack's order
    lk = replink.link(replink.node_events(p), replink.node_events(r))
    assert lk.early == lk.checked == 40
    p, r, _ = simulate(link_at=2121 * US)  # 1 µs after the sync's end
    assert replink.link(replink.node_events(p), replink.node_events(r)).early == 0


@pytest.mark.parametrize("theta_ms", [0.0, 5.0, -123.4])
def test_the_replica_clock_offset_from_the_exchange(theta_ms):
    theta = int(theta_ms * 1e6)
    p, r, _ = simulate(theta=theta)
    # the hosts' realtime clocks off by 300 µs: only a guess, the exchange corrects it
    e = replink.exchange(replink.node_events(p), replink.node_events(r), guess_ns=theta + 300 * US)
    assert e is not None and e.lower_ns <= theta <= e.upper_ns
    # the bounds are the one-way trips: stream read 10 µs after its write, ack read 20 µs after
    assert e.upper_ns - theta == 10 * US and theta - e.lower_ns == 20 * US and e.error_ns == 15 * US
    moved = replink.node_events(r, clock_offset_ns=e.offset_ns)
    lk = replink.link(replink.node_events(p), moved)
    assert abs(float(np.median(lk.lag_ns)) - 2149 * US) <= e.error_ns


def test_a_replica_that_never_drains_is_not_joined_but_still_witnessed():
    p, r, _ = simulate(link_at=1000 * US)
    # every replica read is short of the primary's writes: no read ends where a write did
    req = r["requests"]
    req["bytes"] = [b - 1 if e == 1 and b == 100 else b for b, e in zip(req["bytes"], req["event"])]
    lk = replink.link(replink.node_events(p), replink.node_events(r))
    assert not lk.joined and len(lk.lag_ns) == 0 and lk.chains == []
    assert lk.early == 40  # from the primary's own writes


def test_replication_record_from_the_kernel_alone():
    """No probe ran (a merged recording of observed nodes): the pairs the kernel saw are the probes."""
    p, r, truth = simulate()
    rec = replication.replication([{"workload": "write-only", "value_size": 64, "status": "ok", "server": p,
                                    "replicas": [r]}], [])
    span = (truth[0]["reply"] - truth[0]["p0"]) / US
    assert rec.source == "kernel" and rec.probes == 40 and rec.waitaof_p50_us == pytest.approx(span)
    assert sum(rec.components_us.values()) == pytest.approx(span, abs=0.5)
    assert rec.early_propagated == 0 and rec.lag_p50_us == pytest.approx(2149)
