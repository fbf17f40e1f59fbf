"""record --cluster's pure logic (issue 74): the slots spread evenly and every key routed to the shard owning its
CRC16 slot (against valkey-py's key_slot), the system's figures as the shards' added (counts and histograms), and
nodes.conf's syncs told apart from the AOF's in a sync record built here."""
import numpy as np
import pytest
from valkey.crc import key_slot

from valkeytrace.histogram import LatencyHistogram
from valkeytrace.server.cluster import SLOTS, key_shards, slot_ranges
from valkeytrace.tracers.config_fsync import _config_syncs
from valkeytrace.workload.boundary import EVENT
from valkeytrace.workload.cluster_load import merged
from valkeytrace.workload.openloop import LoadResult


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_the_slots_are_spread_evenly_and_all_covered(n):
    r = slot_ranges(n)
    assert r[0][0] == 0 and r[-1][1] == SLOTS - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(r, r[1:]))
    sizes = [b - a + 1 for a, b in r]
    assert max(sizes) - min(sizes) <= 1


def test_every_key_goes_to_the_shard_that_owns_its_slot():
    ranges = [[(0, 99), (8000, 16383)], [(100, 7999)]]  # a shard may own several ranges
    owner = key_shards(5000, ranges)
    for i in range(5000):
        s = key_slot(b"key:%012d" % i)
        assert owner[i] == (1 if 100 <= s <= 7999 else 0)
    assert (key_shards(100, [[(0, 10)]]) == -1).any()  # a slot no shard serves: -1


def _result(values_ns, answered, rate):
    h = LatencyHistogram.from_values(np.array(values_ns, dtype=np.uint64))
    z = dict(due=answered, sent=answered, answered=answered, answered_in_window=answered, answered_drained=answered,
             late=0, errors=1, unanswered=0, rejected=0, acked=0, conns=4, pipelined=0, held=0, held_max=2)
    return LoadResult(op="SET", rate=rate, arrival="poisson", window_s=2.0, answered_span_s=1.9, cpu_s=0.5,
                      pool="fixed", corrected=h.to_dict(), service=h.to_dict(), **z)


def test_the_system_is_the_shards_added():
    a, b = _result([1_000_000] * 30, 30, 10.0), _result([9_000_000] * 10, 10, 5.0)
    m = merged([a, b])
    assert (m.answered, m.errors, m.conns, m.rate, m.held_max) == (40, 2, 8, 15.0, 2)
    h = LatencyHistogram.from_dict(m.corrected)
    assert h.count == 40 and h.percentile(50) < 2_000_000 < h.percentile(90)


def _ev(rows):
    out = np.zeros(len(rows), dtype=EVENT)
    for i, (ns, ino, kind, tid) in enumerate(rows):
        out[i]["ns"], out[i]["ino"], out[i]["kind"], out[i]["tid"] = ns, ino, kind, tid
    return out


def test_nodes_conf_syncs_are_told_apart_from_the_aof_s():
    aof, conf, datadir, main, bio = 11, 22, 33, 100, 101
    ev = _ev([(0, aof, 1, main), (4_000_000, aof, 2, main),        # the AOF's fdatasync: not counted
              (5_000_000, conf, 1, main), (7_000_000, conf, 2, main),  # nodes.conf's temporary file: 2 ms
              (8_000_000, datadir, 1, main), (8_500_000, datadir, 2, main),  # its directory: 0.5 ms
              (9_000_000, conf, 1, bio), (9_100_000, conf, 2, bio)])  # another thread's: not the main thread's
    got = _config_syncs(ev, main, {aof})
    assert got.tolist() == [2_000_000, 500_000]
