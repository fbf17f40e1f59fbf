"""The durable virtual offload keeps #3381's contract, against a real valkey-server with the shim
preloaded, every fdatasync 80 ms long, driven over raw sockets (the independent truths: the clock,
the AOF file on disk, the server's exit status):
  - every command that changes data (scripts, functions, hashes, expiries, transactions,
    pipelines, a request split across reads) is answered only after its fdatasync; read-only forms
    (EVAL_RO, GET of an old key) are not; a read of a key whose write is not yet durable waits;
  - the recording's witness can fail: with the command table made to lie about HINCRBY the reply
    leaves early and the witness counts it; under early-ack it counts every write reply;
  - a real full disk (a tmpfs): the server ends with status 1 as it does without the emulation,
    and every acknowledged key is in the AOF; SIGTERM under load drains: every acknowledged key
    is on disk and the server exits 0."""
import glob
import os
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from valkeytrace.server.process import EmbeddedServer
from valkeytrace.tracers import offload as voff
from valkeytrace.tracers.emulation import shim_library
from vtcli import must_have, vt

pytestmark = pytest.mark.integration
DELAY_MS = 80


def cmd(*args) -> bytes:
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a) for a in args])


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise ConnectionError("closed")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        if line[:1] == b"$" and int(line[1:]) >= 0:
            n = int(line[1:])
            while len(self.buf) < n + 2:
                d = self.s.recv(65536)
                if not d:
                    raise ConnectionError("closed")
                self.buf += d
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if line[:1] == b"*" and int(line[1:]) > 0:
            return [self.reply() for _ in range(int(line[1:]))]
        return line

    def timed(self, *args):
        t0 = time.monotonic()
        self.s.sendall(cmd(*args))
        r = self.reply()
        return r, (time.monotonic() - t0) * 1000


def launch(mode, delay_ms=DELAY_MS, config=None, corrupt=None):
    """A valkey-server under the virtual offload, its command table loaded as record loads it;
    corrupt: command names whose write flag is removed from the table (a lying decision)."""
    stats = voff.OffloadStats(mode)
    env = {**os.environ, "LD_PRELOAD": shim_library(), **stats.env()}
    if delay_ms:
        env["VALKEYTRACE_FSYNC_DELAY"] = f"const:{int(delay_ms * 1e6)}"
    target = EmbeddedServer(io_threads=1, env=env, server_config=config)
    stats.load_commands(target.client())
    voff.check_engaged(target.pid)
    if corrupt:
        entries = stats.shared[0]["control"]["entries"]
        for i in range(int(stats.shared[0]["control"]["nentries"])):
            if entries[i]["name"].decode() in corrupt:
                entries[i]["flags"] = int(entries[i]["flags"]) & ~voff.F_WRITE
    return target, stats


def aof_bytes(target) -> bytes:
    return b"".join(open(p, "rb").read() for p in glob.glob(os.path.join(target.workdir, "appendonlydir", "*")))


@pytest.fixture
def durable():
    target, stats = launch("durable")
    yield target, stats
    target.stop()
    stats.close()


WRITES = [("SET", "k1", "v"), ("INCR", "n"), ("HINCRBY", "h", "f", "1"), ("HSET", "h2", "f", "v"),
          ("EXPIREAT", "old", "99999999999"), ("LPUSH", "l", "x"), ("SADD", "s", "m"), ("ZADD", "z", "1", "m"),
          ("SETEX", "k2", "100", "v"), ("APPEND", "k1", "w"), ("XADD", "st", "*", "f", "v"), ("RENAME", "k1", "k3"),
          ("SETRANGE", "k3", "0", "y"), ("PEXPIRE", "h2", "100000"), ("INCRBYFLOAT", "fl", "1.5"),
          ("SMOVE", "s", "s2", "m"), ("GETDEL", "k3"), ("DEL", "k2"), ("LPOP", "l"),
          ("EVAL", "redis.call('SET', KEYS[1], 'x') return 1", "1", "ev"),
          ("FCALL", "vtset", "1", "fc")]


def test_every_change_waits_for_its_fdatasync_and_reads_only_what_they_must(durable):
    target, stats = durable
    s0 = stats.snapshot()  # valkeytrace's own commands before the table was loaded were unknown (held)
    a, b, c = Conn(target.port), Conn(target.port), Conn(target.port)
    a.timed("SET", "old", "v")
    a.timed("FUNCTION", "LOAD", "#!lua name=vtlib\nredis.register_function('vtset', "
                                "function(keys, args) return redis.call('SET', keys[1], 'y') end)")
    sha = a.timed("SCRIPT", "LOAD", "return redis.call('SET', KEYS[1], 'z')")[0].decode()
    slow = {w[0]: ms for w in WRITES + [("EVALSHA", sha, "1", "es")] for ms in [a.timed(*w)[1]]}
    fast = [w for w, ms in slow.items() if ms < DELAY_MS * 0.95]
    assert not fast, f"acknowledged before their fdatasync: {[(w, round(slow[w], 1)) for w in fast]}"
    t0 = time.monotonic()  # WAITAOF's "1 local" leaves only once its connection's SET is durable
    a.s.sendall(cmd("SET", "w", "1") + cmd("WAITAOF", "1", "0", "0"))
    assert a.reply() == b"+OK" and a.reply() == [b":1", b":0"]
    assert (time.monotonic() - t0) * 1000 >= DELAY_MS * 0.95
    a.timed("MULTI"), a.timed("SET", "tx", "1")
    assert a.timed("EXEC")[1] >= DELAY_MS * 0.95, "EXEC of a transaction with a write answered early"
    # read-only forms and old keys are answered at once
    for args in (("GET", "old"), ("EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "old"), ("EXISTS", "old")):
        r, ms = b.timed(*args)
        assert ms < 20, f"{args[0]} of a durable key took {ms:.1f} ms"
    # a key whose write is in flight: its read waits; another key's does not
    a.s.sendall(cmd("SET", "hot", "new"))
    time.sleep(0.01)
    r, hot_ms = b.timed("GET", "hot")
    r2, cold_ms = c.timed("GET", "old")
    assert a.reply() == b"+OK"
    assert r == b"new" and hot_ms >= DELAY_MS * 0.5, f"a read of a key not yet durable answered in {hot_ms:.1f} ms"
    assert cold_ms < 20, f"a read of another key waited {cold_ms:.1f} ms"
    # a keyspace-wide read (DBSIZE) waits for a write in flight too
    a.s.sendall(cmd("SET", "hot2", "new"))
    time.sleep(0.01)
    assert b.timed("DBSIZE")[1] >= DELAY_MS * 0.5
    a.reply()
    # ten SETs in one write: the first reply waits; one SET split across reads 30 ms apart waits
    t0 = time.monotonic()
    c.s.sendall(b"".join(cmd("SET", f"p{i}", "v") for i in range(10)))
    first = c.reply()
    first_ms = (time.monotonic() - t0) * 1000
    assert first == b"+OK" and first_ms >= DELAY_MS * 0.95 and all(c.reply() == b"+OK" for _ in range(9))
    whole = cmd("SET", "split", "v")
    for cut in (3, 9, len(whole) - 1):
        c.s.sendall(whole[:cut])
        time.sleep(0.03)
        t0 = time.monotonic()
        c.s.sendall(whole[cut:])
        assert c.reply() == b"+OK" and (time.monotonic() - t0) * 1000 >= DELAY_MS * 0.95
    assert all(k in aof_bytes(target) for k in (b"hot", b"split", b"p9", b"vtset", b"ev"))
    s = stats.snapshot()
    assert s["early_replies"] == 0 and s["witness_checked"] >= 40
    assert s["held_read_replies"] >= 2 and s["held_write_replies"] >= len(WRITES) + 14
    assert s["unknown_commands"] == s0["unknown_commands"] and s["table_entries"] > 200


def test_the_witness_counts_what_a_lying_table_lets_out():
    """HINCRBY made a non-write in the table: its reply leaves before durability, the witness
    (which never reads the table) counts it; a correct command next to it is not counted."""
    target, stats = launch("durable", corrupt={"hincrby"})
    try:
        a = Conn(target.port)
        a.timed("SET", "warm", "x")
        _, ms = a.timed("HINCRBY", "h", "f", "1")
        assert ms < 20, "the corrupted table still held HINCRBY"
        _, set_ms = a.timed("SET", "k", "v")
        assert set_ms >= DELAY_MS * 0.95
        assert stats.snapshot()["early_replies"] == 1
    finally:
        target.stop()
        stats.close()


def test_early_ack_counts_every_write_reply():
    target, stats = launch("early-ack")
    try:
        a = Conn(target.port)
        writes = [("SET", "a", "1"), ("HINCRBY", "h", "f", "1"), ("INCR", "n"), ("LPUSH", "l", "x"),
                  ("EVAL", "redis.call('SET', KEYS[1], 'x') return 1", "1", "b")]
        assert all(a.timed(*w)[1] < 20 for w in writes), "early-ack held a reply"
        a.timed("GET", "zz")  # a read of a key never written: not early
        assert stats.snapshot()["early_replies"] == len(writes)
    finally:
        target.stop()
        stats.close()


def _fill(port, value_size, deadline_s):
    """SET until the server stops answering: (acknowledged keys, connection closed by the server)."""
    a = Conn(port)
    a.s.settimeout(5)
    acked, val = [], b"x" * value_size
    try:
        for i in range(100000):
            r, _ = a.timed("SET", f"full:{i:06d}", val)
            if r != b"+OK":
                break
            acked.append(f"full:{i:06d}".encode())
        while time.monotonic() < deadline_s:
            a.timed("PING")
            time.sleep(0.1)
    except (ConnectionError, OSError):
        return acked, True
    return acked, False


@pytest.mark.parametrize("mode,io_threads", [(None, 1), ("durable", 1), ("durable", 2)])
def test_a_full_disk_ends_the_server_as_without_the_emulation(mode, io_threads):
    if os.geteuid() != 0:
        must_have("a tmpfs to fill needs root")
    mnt = tempfile.mkdtemp(prefix="vt-full-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], check=True)
    try:
        if mode:
            target, stats = launch(mode, delay_ms=2, config={"dir": mnt, "io-threads": str(io_threads)})
        else:
            env = {**os.environ, "LD_PRELOAD": shim_library(), "VALKEYTRACE_FSYNC_DELAY": "const:2000000"}
            target, stats = EmbeddedServer(io_threads=1, env=env, server_config={"dir": mnt}), None
        target.workdir_aof = mnt
        acked, closed = _fill(target.port, 16384, time.monotonic() + 15)
        proc = target.proc
        proc.wait(timeout=15)
        data = b"".join(open(p, "rb").read() for p in glob.glob(os.path.join(mnt, "appendonlydir", "*")))
        missing = [k for k in acked if k + b"\r\n$16384\r\n" not in data]
        assert acked and closed and not missing, f"acked {len(acked)}, missing {len(missing)}, closed {closed}"
        assert proc.returncode == 1, f"the server exited with {proc.returncode}"
        log = " ".join(target._log)
        assert "Can't recover from AOF write error" in log or "Can't persist AOF" in log, log[-500:]
        if stats:
            assert stats.failure() and stats.snapshot() is not None
            target.stop()
            stats.close()
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


def test_sigterm_under_load_drains_every_acknowledged_write():
    target, stats = launch("durable", delay_ms=20)
    acked, stop = [], threading.Event()

    def client(i):
        a = Conn(target.port)
        try:
            for j in range(100000):
                if stop.is_set():
                    return
                if a.timed("SET", f"t{i}:{j:05d}", "v")[0] == b"+OK":
                    acked.append(f"t{i}:{j:05d}".encode())
        except (ConnectionError, OSError):
            pass
    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    target.proc.send_signal(15)
    stop.set()
    code = target.proc.wait(timeout=60)
    for t in threads:
        t.join()
    data = aof_bytes(target)
    missing = [k for k in acked if k not in data]
    state, at_exit = stats.state()[0], stats.at_exit()
    target.stop()
    stats.close()
    assert len(acked) > 100 and not missing, f"{len(missing)} of {len(acked)} acknowledged keys not on disk"
    assert code == 0 and state == voff.STATE_DRAINED
    # drained on valkey's own shutdown path (its final fsync), not in a destructor after exit()
    assert at_exit["shutdown_drains"] == 1 and at_exit["last_signal"] == "SIGTERM", at_exit


def test_refused_where_nothing_would_be_offloaded(tmp_path):
    res = vt("record", "--workload", "none", "--duration", "1", "--emulate-offload", "durable", "--backend", "none",
             "--server-config", "appendonly=no", "-o", tmp_path / "x.vtrace")
    assert res.returncode == 2 and "multi-part AOF" in res.stderr, res.stderr
    assert len([x for x in res.stderr.splitlines() if x.strip()]) == 1 and not (tmp_path / "x.vtrace").exists()


def test_a_client_that_reads_late_gets_every_held_reply_whole(durable):
    """Twenty 2 MB replies held behind a SET (pipelined, nobody reading): released, they fill the
    socket, which would block; the offload keeps the rest for later, and the client, reading at
    last, parses every reply whole and in order."""
    target, stats = durable
    a, b = Conn(target.port), Conn(target.port)
    big = b"".join(b"%07d" % i for i in range(300000))[:2_000_000]
    a.timed("SET", "big", big)
    b.s.sendall(cmd("SET", "k", "v") + b"".join(cmd("GET", "big") for _ in range(20)) + cmd("PING"))
    time.sleep(1.0)  # the SET's job ends; the replies behind it meet a full socket
    b.s.settimeout(30)
    assert b.reply() == b"+OK"
    assert all(b.reply() == big for _ in range(20)) and b.reply() == b"+PONG"
    s = stats.snapshot()
    assert s["blocked_deliveries"] >= 1 and s["dropped_replies"] == 0 and s["early_replies"] == 0


def _pings_during(port, seconds) -> list:
    """PING round trips (ms) on a connection of its own, back to back for `seconds`: the main thread's
    loop turning (a PING is answered in the iteration that reads it, held for nothing)."""
    b, out, end = Conn(port), [], time.monotonic() + seconds
    while time.monotonic() < end:
        out.append(b.timed("PING")[1])
    return out


def test_a_client_closed_with_replies_held_does_not_stop_the_main_thread():
    """A client sends a SET and closes at once, its reply held for a 400 ms fdatasync: valkey frees the
    client; the main thread must not wait for the job (it did, up to 2 s in 5 ms waits). Measured: PINGs on
    another connection keep coming back within 100 ms while the job runs; the write still becomes durable
    (a later GET sees it), and the dropped reply is counted."""
    target, stats = launch("durable", delay_ms=400)
    try:
        a = Conn(target.port)
        a.s.sendall(cmd("SET", "closed", "v"))
        time.sleep(0.02)  # read and executed: its reply held
        a.s.close()
        pings = _pings_during(target.port, 0.35)
        assert len(pings) > 20 and max(pings) < 100, f"the main thread stalled: PING max {max(pings):.0f} ms"
        assert Conn(target.port).timed("GET", "closed")[0] == b"v"  # waits for the write's job, then sees it
        assert stats.snapshot()["dropped_replies"] >= 1
    finally:
        target.stop()
        stats.close()


def test_closing_the_aof_while_its_bytes_wait_does_not_stop_the_main_thread():
    """CONFIG SET appendonly no closes the server's AOF fd on the main thread while a 600 ms fdatasync has
    bytes queued behind it: the close must not wait for them (it did, with no deadline). Measured: the
    command answers within 200 ms and PINGs keep coming back; then every acknowledged SET is in the file
    (the offload wrote it through its own duplicate of the fd, closed once durable)."""
    target, stats = launch("durable", delay_ms=600)
    try:
        a = Conn(target.port)
        a.timed("SET", "first", "v")  # answered once durable: the next job has the one below queued
        a.s.sendall(cmd("SET", "queued", "w"))
        time.sleep(0.05)  # read and executed: its AOF bytes wait for the job in flight
        _, ms = Conn(target.port).timed("CONFIG", "SET", "appendonly", "no")
        pings = _pings_during(target.port, 0.2)
        assert ms < 200, f"CONFIG SET appendonly no took {ms:.0f} ms: the close waited for the disk"
        assert max(pings) < 100, f"the main thread stalled: PING max {max(pings):.0f} ms"
        assert a.reply() == b"+OK"  # the held reply, once its bytes were durable
        assert b"queued" in aof_bytes(target)
        assert stats.snapshot()["early_replies"] == 0
    finally:
        target.stop()
        stats.close()


def test_an_aborted_shutdown_leaves_the_fsync_off_the_main_thread():
    """SIGTERM while a replica lags: valkey waits for it (shutdown-timeout), and SHUTDOWN ABORT calls the
    shutdown off. The offload must go on taking the fdatasync off the main thread (the signal's mark made
    every later sync drain on it: fsync-on-main, silently). Measured: PINGs stay fast while a SET's 300 ms
    job runs, and the SET itself still waits for it."""
    target, stats = launch("durable", delay_ms=300, config={"repl-diskless-sync-delay": "0"})  # the sync at once
    replica = EmbeddedServer(io_threads=1, server_config={"replicaof": f"127.0.0.1 {target.port}"})
    try:
        a = Conn(target.port)
        deadline = time.monotonic() + 20
        while b"state=online" not in a.timed("INFO", "replication")[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(replica.pid, 19)  # SIGSTOP: it acknowledges nothing more
        assert a.timed("SET", "before", "1")[1] >= 300 * 0.95
        target.proc.send_signal(15)  # the shutdown waits for the lagging replica
        time.sleep(0.3)
        assert a.timed("SHUTDOWN", "ABORT")[0] == b"+OK"
        os.kill(replica.pid, 18)  # SIGCONT
        done: list = []
        t = threading.Thread(target=lambda: done.append(Conn(target.port).timed("SET", "after", "1")))
        t.start()
        time.sleep(0.05)
        pings = _pings_during(target.port, 0.2)
        t.join()
        assert done and done[0][0] == b"+OK" and done[0][1] >= 300 * 0.95, done
        assert max(pings) < 100, f"the fdatasync ran on the main thread after the aborted shutdown: PING max {max(pings):.0f} ms"
        assert target.alive()
    finally:
        try:
            os.kill(replica.pid, 18)
        except OSError:
            pass
        replica.stop()
        target.stop()
        stats.close()


def test_a_stalling_disk_stalls_one_fdatasync_in_each_period():
    """--inject-fsync-delay 1ms,stall:300ms/1s under appendfsync always: SETs on one connection for 2.6 s
    (the clock the witness): about one in each second waits the 300 ms stall, the rest ~1 ms."""
    env = {**os.environ, "LD_PRELOAD": shim_library(), "VALKEYTRACE_FSYNC_DELAY": "const:1000000;stall:300000000/1000000000"}
    target = EmbeddedServer(io_threads=1, env=env)
    try:
        a, lat, end = Conn(target.port), [], time.monotonic() + 2.6
        while time.monotonic() < end:
            lat.append(a.timed("SET", "k", "v")[1])
        stalled = [ms for ms in lat if ms >= 290]
        assert 2 <= len(stalled) <= 3 and max(stalled) < 400, stalled
        quick = sorted(ms for ms in lat if ms < 290)
        assert len(quick) > 100 and quick[len(quick) // 2] < 5, quick[len(quick) // 2]
    finally:
        target.stop()
