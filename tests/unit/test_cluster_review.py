"""Issue 74's review of the cluster code: --failover refused outside one measured window of a cluster that can
elect, the failover one-shot, every node under the side's offload design and drained as shard 0's primary, the
failing shard by number (not by its spelling), runs[].node_windows aligned with cluster.nodes, and a shard that
owns no key of the keyspace left out of the load (no client drawing from the whole keyspace, nor a closed loop)."""
import time
from types import SimpleNamespace

import numpy as np
import pytest

from valkeytrace import cluster_run
from valkeytrace import plan as planning
from valkeytrace.errors import VTUsageError
from valkeytrace.server import cluster as vcluster
from valkeytrace.server.cluster import Cluster, Node, RemoteNode
from valkeytrace.workload import cluster_load
from valkeytrace.workload.cluster_load import Shard
from valkeytrace.workload.failover import Failover
from valkeytrace.workload.openloop import OpenLoopError, Spec

from test_cluster_logic import _result


def _failover_plan(**kw):
    base = dict(workloads=("write-only",), sizes=(64,), repeat=1, duration=8.0, backend="none", cluster=3,
                replicas=1, failover="0@2", rates=(1000.0,))
    return planning.build(planning.RecordOptions(**{**base, **kw}))


def test_failover_is_refused_unless_one_window_holds_it_and_a_majority_can_elect():
    assert _failover_plan().server.failover == "0@2"  # one window, T inside it, 3 primaries
    for kw, words in (({"repeat": 2}, "--repeat 1"), ({"sizes": (64, 256)}, "one --sizes"),
                      ({"rates": (1000.0, 2000.0)}, "one --rate"), ({"duration": 2.0}, "inside the window"),
                      ({"cluster": 2}, "--cluster 3")):
        with pytest.raises(VTUsageError, match=words):
            _failover_plan(**kw)


def test_a_failover_kills_once_whatever_windows_call_it(tmp_path):
    kills = []
    primary = SimpleNamespace(target=SimpleNamespace(kill=lambda: kills.append(time.monotonic())))
    fo = Failover(SimpleNamespace(primary=lambda shard: primary), 0, 0.0, str(tmp_path / "k"), (0, 100))
    fo._promotion = lambda: None  # the kill alone
    fo()
    first = fo.marks.window
    fo()  # a second write-only window: nothing
    time.sleep(0.3)
    assert len(kills) == 1 and fo.marks.window == first and fo.fired


class _Offload:
    made: list = []

    def __init__(self, mode, **kw):
        self.kw = kw
        _Offload.made.append(self)

    def env(self):
        return {"VALKEYTRACE_OFFLOAD_DESIGN": self.kw.get("design", "bio-write")}

    def state(self):
        return (0, 0)

    def load_commands(self, client):
        pass


class _Server:
    def __init__(self, **kw):
        self.env, self.pid, self.drain_state = kw["env"], 4242, None

    def client(self):
        return None

    def stop(self):
        pass


def test_every_primary_runs_the_side_s_offload_design_and_waits_for_its_drain(monkeypatch):
    from valkeytrace.server import process
    from valkeytrace.tracers import offload as voff

    monkeypatch.setattr(voff, "OffloadStats", _Offload)
    monkeypatch.setattr(voff, "check_engaged", lambda pid: None)
    monkeypatch.setattr(process, "EmbeddedServer", _Server)
    plan = _failover_plan(failover="01@2", offload_mode="durable", offload_design="main-write", inject_spec="4ms")
    cut = SimpleNamespace(environment=lambda env, run_as: {"VALKEYTRACE_CUT": "1"})
    parts = cluster_run.ClusterParts(Cluster(3, 1, 1000))
    target, _, offload = cluster_run._node(plan, parts, cut, None, 1, "primary")
    assert target.env["VALKEYTRACE_OFFLOAD_DESIGN"] == "main-write" and offload is parts.offloads[0]
    assert target.drain_state is not None and target.drain_state() == (0, 0)  # its stop waits for its drain


def test_the_failing_shard_is_known_by_its_number_not_its_spelling(monkeypatch):
    from valkeytrace.server import process

    monkeypatch.setattr(process, "EmbeddedServer", _Server)
    plan = _failover_plan(failover="01@2")
    cut = SimpleNamespace(environment=lambda env, run_as: {"VALKEYTRACE_CUT": "1"})
    parts = cluster_run.ClusterParts(Cluster(3, 1, 1000))
    target, _, _ = cluster_run._node(plan, parts, cut, None, 1, "primary")
    assert target.env.get("VALKEYTRACE_CUT") == "1"  # "01@2" is shard 1's failover: its primary logs its syncs
    other, _, _ = cluster_run._node(plan, parts, cut, None, 2, "primary")
    assert "VALKEYTRACE_CUT" not in other.env


class _Tracer:
    def __init__(self, window):
        self.window = window

    def window_begin(self, requests=False, observe=False):
        pass

    def window_end(self, gone_ns):
        return self.window


def test_node_windows_follow_cluster_nodes_an_untraced_node_a_null():
    up = SimpleNamespace(gone=lambda: None, port=1, pid=1, host="127.0.0.1")
    c = Cluster(2, 1, 0, nodes=[Node(0, "primary", up), Node(0, "replica", RemoteNode("10.0.0.9", 7001)),
                                Node(1, "primary", up, _Tracer("w1")), Node(1, "replica", up, _Tracer("w2"))])
    assert c.window_end() == [None, "w1", "w2"]


def test_each_primary_s_offload_counters_go_in_its_node_window(monkeypatch):
    from valkeytrace.tracers import offload as voff

    monkeypatch.setattr(voff, "window", lambda a, b: {"jobs": b - a})
    counter = iter([3, 10])
    up = SimpleNamespace(gone=lambda: None)
    off = SimpleNamespace(snapshot=lambda: next(counter))
    c = Cluster(2, 0, 0, nodes=[Node(0, "primary", up), Node(1, "primary", up, _Tracer({"window_ns": 1}), off)])
    c.window_begin()
    assert c.window_end() == [{"window_ns": 1, "offload": {"jobs": 7}}]


def test_a_seed_whose_first_node_is_not_found_is_refused(monkeypatch):
    monkeypatch.setattr(vcluster, "discover", lambda seed: ([[(0, 16383)]], [[("10.0.0.9", 7000, "primary", None)]]))
    plan = SimpleNamespace(tracer=SimpleNamespace(backend="none"), server=SimpleNamespace(cluster_seed="10.0.0.9:7000"),
                           settings=SimpleNamespace(keyspace=100))
    with pytest.raises(VTUsageError, match="not among the nodes"):
        cluster_run.attach(plan, SimpleNamespace(pid=4242))


def test_a_shard_owning_no_key_runs_no_client_and_keeps_its_row(monkeypatch, tmp_path):
    made = []

    class Client:
        def __init__(self, spec, cpus=None):
            made.append(spec)

        def run(self, on_start, on_end):
            on_start()
            on_end()
            return _result([1_000_000] * 10, 10, 1000.0)

    monkeypatch.setattr(cluster_load, "OpenLoopClient", Client)
    np.arange(5, dtype=np.uint32).tofile(tmp_path / "0.keys")
    np.zeros(0, dtype=np.uint32).tofile(tmp_path / "1.keys")
    shards = (Shard(0, "127.0.0.1", 7000, str(tmp_path / "0.keys"), 5), Shard(1, "127.0.0.1", 7001, str(tmp_path / "1.keys"), 0))
    edges = []
    results = cluster_load.run_shards(shards, Spec("127.0.0.1", 7000, "SET", 1000.0, 1.0, 5, 64), None,
                                      lambda: edges.append("start"), lambda: edges.append("end"))
    assert [s.port for s in made] == [7000] and made[0].rate == 1000.0  # the whole rate on the shard with the keys
    assert results[1] is None and edges == ["start", "end"]
    run: dict = {}
    cluster_load.record_ops(run, "SET", shards, results)
    assert run["shards"][1]["ops"] == {} and run["shards"][1]["keys"] == 0 and run["shards"][0]["ops"]


def test_the_load_client_refuses_an_empty_key_list(tmp_path):
    from valkeytrace._native import ffi, lib
    from valkeytrace.workload import openloop

    np.zeros(0, dtype=np.uint32).tofile(tmp_path / "none.keys")
    spec = Spec("127.0.0.1", 7000, "SET", 1000.0, 1.0, 5, 64, keys_path=str(tmp_path / "none.keys"))
    with pytest.raises(OpenLoopError, match="no keys"):
        openloop._config(ffi, lib, spec, -1, [])
