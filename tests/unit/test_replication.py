"""record --replicas' figures from the durability probe's columns: percentiles over every probe of
a cell's runs, the replicas that acked; with no kernel events of the link, no part, lag or witness
is made up (tests/unit/test_replink.py decomposes a simulated one); compare's significance."""
import numpy as np

from valkeytrace.analysis.replication import replica_summaries, replication, significance
from valkeytrace.histogram import LatencyHistogram


def _run(waits, sets, acked, replica_fsync_ns=()):
    run = {"workload": "write-only", "value_size": 64, "status": "ok", "replication": {"rate_per_s": 150, "replicas": 1, "sent_ns": list(range(len(waits))),
                                           "set_us": list(sets), "waitaof_us": list(waits), "acked": list(acked)}}
    if len(replica_fsync_ns):
        hist = LatencyHistogram.from_values(np.array(replica_fsync_ns, dtype=np.uint64)).to_dict()
        run["replicas"] = [{"backend": "ebpf", "window_ns": 10**9, "pid": 7, "main_tid": 7, "lost_events": 0,
                            "threads": [{"tid": 7, "name": "valkey-server", "role": "main",
                                         "calls": {"fdatasync": dict(hist, bytes=0)}, "off_cpu_ns": {}}]}]
    return run


def test_percentiles_over_every_probe_and_the_parts_named():
    rng = np.random.default_rng(3)
    w1, w2 = rng.normal(9000, 500, 300), rng.normal(9500, 500, 200)
    s1, s2 = rng.normal(4500, 200, 300), rng.normal(4600, 200, 200)
    runs = [_run(w1, s1, [1] * 299 + [0], [4_000_000] * 50), _run(w2, s2, [1] * 200, [4_200_000] * 50)]
    reps = replica_summaries(runs)
    r = replication(runs, reps)
    waits, sets = np.concatenate([w1, w2]), np.concatenate([s1, s2])
    assert r.probes == 500 and r.replicas == 1 and abs(r.acked_all_share - 499 / 500) < 1e-9
    assert abs(r.waitaof_p50_us - np.percentile(waits, 50)) < 1e-6 and abs(r.waitaof_p99_us - np.percentile(waits, 99)) < 1e-6
    assert abs(r.set_p50_us - np.percentile(sets, 50)) < 1e-6
    # the windows hold no sized socket events: nothing to decompose, no lag, no witness (said, not made up)
    assert r.components_us == {} and r.lag_p50_us is None and r.early_propagated is None
    assert reps[0].role("main").fdatasync.p50_us >= 3900  # the replica's own summary still


def test_compare_decides_a_replication_change_once():
    rng = np.random.default_rng(5)
    base = [_run(rng.normal(9000, 400, 200), [4000] * 200, [1] * 200) for _ in range(3)]
    same = [_run(rng.normal(9050, 400, 200), [4000] * 200, [1] * 200) for _ in range(3)]
    moved = [_run(rng.normal(12000, 400, 200), [4000] * 200, [1] * 200) for _ in range(3)]
    b, s, m = (replication(x, []) for x in (base, same, moved))
    assert significance(b, m, "waitaof_p50_us", 0.15)[0] is True
    sig, rule = significance(b, s, "waitaof_p50_us", 0.15)
    assert (sig, rule.code, rule.min_effect) == (False, "rule.under", 0.15)
    assert significance(b, replication(base[:1], []), "waitaof_p50_us", 0.15)[0] is None  # one run a side


def test_no_probe_no_record():
    bare = {"workload": "write-only", "value_size": 64, "status": "ok"}
    assert replication([bare], []) is None and replica_summaries([bare]) == []
