"""record --replicas (issue 40, first part): a launched primary and a replica recorded as one
system, against the real servers and the kernel: the replica is synced and traced (its own main
thread's fdatasyncs, each carrying the injected delay), the durability probe's WAITAOF cannot
complete before both nodes' fsyncs (an injected 2 ms each: at least 4 ms), and nothing is left
running after."""
import psutil
import pytest

from valkeytrace.recording import format as recfmt
from vtcli import report_json, skip_unless_recorded, vt

pytestmark = pytest.mark.integration


def test_a_primary_and_its_replica_recorded_as_one_system(tmp_path):
    rec = tmp_path / "r.vtrace"
    before = {p.pid for p in psutil.process_iter(["name"]) if "valkey" in (p.info["name"] or "")}
    res = vt("record", "--replicas", "1", "--workload", "write-only", "--sizes", "64", "--duration", "2",
             "--repeat", "1", "--io-threads", "1", "--keyspace", "500", "--inject-fsync-delay", "2ms",
             "--backend", "ebpf", "-o", rec, timeout=300)
    skip_unless_recorded(res)
    doc = recfmt.read(rec)
    assert sorted(n["role"] for n in doc["nodes"]) == ["primary", "replica"]
    replica = next(n for n in doc["nodes"] if n["role"] == "replica")
    primary = next(n for n in doc["nodes"] if n["role"] == "primary")
    assert replica["primary_port"] == primary["port"] and replica["pid"] != primary["pid"]
    cell = report_json(rec)["runs"][0]["cells"][0]
    (rsum,) = cell["replicas"]
    main = next(t for t in rsum["threads"] if t["role"] == "main")
    assert main["fdatasync"]["count"] >= 10 and main["fdatasync"]["p50_us"] >= 1900, main["fdatasync"]
    r = cell["replication"]
    assert r["probes"] >= 100 and r["acked_all_share"] >= 0.99, r
    # a probe's SET is durable on the primary after its fsync (>= 2 ms), and WAITAOF after the
    # replica's too: the two fsyncs one after the other (the stream leaves after the primary's)
    assert r["set_p50_us"] >= 1900 and r["waitaof_p50_us"] >= 3800 and r["waitaof_p50_us"] > r["set_p50_us"], r
    assert abs(sum(r["components_us"].values()) - r["waitaof_p50_us"]) < 1.0
    after = {p.pid for p in psutil.process_iter(["name"]) if "valkey" in (p.info["name"] or "")}
    assert after <= before, "a server of the recording is still running"


def test_replicas_need_a_server_valkeytrace_launches(tmp_path):
    res = vt("record", "--replicas", "1", "--attach", "1", "-o", tmp_path / "x.vtrace")
    assert res.returncode == 2 and "--replicas" in res.stderr, res.stderr
