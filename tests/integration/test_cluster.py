"""record --cluster (issue 74): a cluster of 2 primaries without replicas launched, loaded by slot and traced
through record and report, each figure against a truth the test holds: the slots the cluster itself says each
node owns (CLUSTER SHARDS is asked of the recording's nodes by nobody but valkeytrace, so the test recomputes the
key split from CRC16), the shards' requests adding up to the system's, every node's threads traced, and nothing
left running."""
import os

import numpy as np
import pytest

from valkeytrace.recording import format as recfmt
from vtcli import report_json, skip_unless_recorded, tagged, vt

pytestmark = pytest.mark.integration


def test_a_cluster_of_two_primaries_recorded_and_reported_as_one_system(tmp_path):
    from valkey.crc import key_slot

    out = tmp_path / "c.vtrace"
    res = vt("record", "--cluster", "2", "--workload", "write-only", "--sizes", "64", "--repeat", "1",
             "--duration", "2", "--io-threads", "1", "--keyspace", "2000", "--write-clients", "8", "--backend", "ebpf",
             "-o", out, timeout=300)
    skip_unless_recorded(res)
    doc = recfmt.read(out)
    cl = doc["cluster"]
    assert [s["slots"] for s in cl["shards"]] == [[[0, 8191]], [[8192, 16383]]]
    assert len(cl["nodes"]) == 2 and len({n["pid"] for n in cl["nodes"]}) == 2 and all(n["traced"] for n in cl["nodes"])
    # each shard's clients drew exactly the keys whose CRC16 slot it owns
    owner = np.array([key_slot(b"key:%012d" % i) >= 8192 for i in range(2000)])
    run = doc["runs"][0]
    assert run["status"] == "ok", run.get("error")
    assert [s["keys"] for s in run["shards"]] == [int((~owner).sum()), int(owner.sum())]
    # both nodes' threads traced over the window: shard 1's primary in node_windows, its AOF synced
    (other,) = run["node_windows"]
    main = next(t for t in other["threads"] if t["role"] == "main")
    assert main["calls"]["fdatasync"]["count"] > 0
    shards_req = sum(s["ops"]["SET"]["requests"] for s in run["shards"])
    assert shards_req == run["ops"]["SET"]["requests"] > 0
    assert all(s["ops"]["SET"]["errors"] == 0 for s in run["shards"])  # no MOVED: every key went to its owner
    cell = report_json(out)["runs"][0]["cells"][0]
    assert [s["shard"] for s in cell["shards"]] == [0, 1]
    tps = [s["ops"]["SET"]["tps"] for s in cell["shards"]]
    assert min(tps) > 0 and abs(sum(tps) - cell["ops"]["SET"]["tps"]) <= 0.1 * cell["ops"]["SET"]["tps"], tps
    assert all("server" in s for s in cell["shards"])  # each primary's own thread summary
    assert report_json(out)["runs"][0]["cluster"]["shards"][1]["primary_port"] == run["shards"][1]["port"]
    # a row per shard under the system's (160 columns: at 80 the Role column folds "shard 1" over two lines)
    text = vt("report", out, env={**os.environ, "COLUMNS": "160"})
    assert text.returncode == 0 and "shard 0" in text.stdout and "shard 1" in text.stdout, text.stdout[-2000:]
    assert not tagged(res.tag), "a node of the cluster is still running"


def test_failover_without_a_cluster_or_replicas_is_one_line(tmp_path):
    res = vt("record", "--failover", "0@2", "--workload", "write-only", "--rate", "1000", "-o", tmp_path / "x.vtrace")
    assert res.returncode != 0 and "needs --cluster" in res.stderr and "Traceback" not in res.stderr
    res = vt("record", "--cluster", "3", "--failover", "0@2", "--workload", "write-only", "--rate", "1000",
             "-o", tmp_path / "x.vtrace")
    assert res.returncode != 0 and "--replicas" in res.stderr and "Traceback" not in res.stderr


def test_a_running_cluster_found_from_a_seed_is_loaded_by_slot_and_left_running(tmp_path):
    """--cluster-seed: a cluster the test launched itself (server/cluster.py, 2 primaries) recorded from one node's
    address: both found and traced, the keys written to the node owning their slot (the test reads them back from
    each node), and both nodes still running after."""
    from valkey.crc import key_slot

    from valkeytrace.server.cluster import Cluster, node_config
    from valkeytrace.server.process import EmbeddedServer

    first = EmbeddedServer(io_threads=1, server_config=node_config({}, 5000))
    cl = Cluster(2, 0, 5000)
    try:
        cl.launch(first, lambda shard, role: (EmbeddedServer(io_threads=1, server_config=node_config({}, 5000)), None))
        out = tmp_path / "s.vtrace"
        res = vt("record", "--cluster-seed", f"127.0.0.1:{cl.primary(1).target.port}", "--workload", "write-only",
                 "--sizes", "64", "--repeat", "1", "--duration", "1", "--keyspace", "400", "--write-clients", "4",
                 "--backend", "ebpf", "-o", out, timeout=300)
        skip_unless_recorded(res)
        doc = recfmt.read(out)
        assert [n["traced"] for n in doc["cluster"]["nodes"]] == [True, True]
        assert {n["pid"] for n in doc["cluster"]["nodes"]} == {first.pid, cl.primary(1).target.pid}
        assert doc["server"]["pid"] == first.pid  # the first primary in slot order is the recording's server
        run = doc["runs"][0]
        assert run["status"] == "ok" and all(s["ops"]["SET"]["errors"] == 0 for s in run["shards"]), run.get("error")
        assert run["node_windows"][0]["pid"] == cl.primary(1).target.pid
        for shard in (0, 1):  # each node holds exactly the keyspace's keys of its slots that were written
            c = cl.primary(shard).target.client()
            keys = {k.decode() for k in c.scan_iter(count=1000)}
            assert keys and all((key_slot(k.encode()) >= 8192) == bool(shard) for k in keys)
        assert first.alive() and cl.primary(1).target.alive()
    finally:
        cl.stop()
        first.stop()
