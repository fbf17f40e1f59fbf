"""The durable offload's bound (--offload-max-pending N --offload-overflow pause|reject, csrc/offload_bound.c)
against a real valkey-server with the shim preloaded, every fdatasync DELAY long, driven over raw sockets.
The truths are the server's own: its replies (an error, +OK, EXECABORT), its keyspace after the fact, the
shim's gauges sampled every millisecond while the load runs (held, behind held ones, pending):
  - the bound counts the replies queued behind held ones: one client pipelining writes under reject
    keeps held + behind + pending within 1.2 N (it is not read while its replies wait);
  - pause with mixed request sizes (a few 16 KB SETs, then small ones): within 1.2 N;
  - a BLPOP, a WAIT and a WAITAOF blocked at the bound do not stop the server: the LPUSH that releases the
    BLPOP is read and answered, and so is a new client's PING;
  - reject refuses a write inside MULTI (the server aborts the EXEC), on a connection whose replies no
    longer match its commands (CLIENT REPLY OFF), and a write whose name is split across reads."""
import os
import socket
import threading
import time

import pytest

from valkeytrace.server.process import EmbeddedServer
from valkeytrace.tracers import offload as voff
from valkeytrace.tracers.emulation import shim_library

pytestmark = pytest.mark.integration


def cmd(*args) -> bytes:
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a) for a in args])


class Conn:
    def __init__(self, port, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _more(self):
        d = self.s.recv(65536)
        if not d:
            raise ConnectionError("closed")
        self.buf += d

    def reply(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        if line[:1] == b"$" and int(line[1:]) >= 0:
            n = int(line[1:])
            while len(self.buf) < n + 2:
                self._more()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if line[:1] == b"*" and int(line[1:]) > 0:
            return [self.reply() for _ in range(int(line[1:]))]
        return line

    def call(self, *args):
        self.s.sendall(cmd(*args))
        return self.reply()


def launch(overflow, n, delay_ms):
    stats = voff.OffloadStats("durable", 0, n, overflow)
    env = {**os.environ, "LD_PRELOAD": shim_library(), **stats.env(),
           "VALKEYTRACE_FSYNC_DELAY": f"const:{int(delay_ms * 1e6)}"}
    target = EmbeddedServer(io_threads=1, env=env)
    stats.load_commands(target.client())
    voff.check_engaged(target.pid)
    return target, stats


@pytest.fixture
def server(request):
    overflow, n, delay_ms = request.param
    target, stats = launch(overflow, n, delay_ms)
    yield target, stats
    target.stop()
    stats.close()


class Peak:
    """The largest held + behind + pending the shim's gauges showed, read every millisecond."""

    def __init__(self, stats):
        self.stats, self.peak, self.done = stats, 0, threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.done.is_set():
            g = self.stats.gauges() or {}
            self.peak = max(self.peak, g.get("held_now", 0) + g.get("behind_now", 0) + g.get("pending_now", 0))
            time.sleep(0.001)

    def stop(self) -> int:
        self.done.set()
        self.t.join()
        return self.peak


def wait_held(stats, at_least=1, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (stats.gauges() or {}).get("held_now", 0) >= at_least:
            return
        time.sleep(0.002)
    raise AssertionError("nothing held: the bound was never reached")


N, SMALL = 40, 400


@pytest.mark.parametrize("server", [("reject", N, 250)], indirect=True)
def test_reject_counts_the_replies_behind_held_ones(server):
    """400 SETs in one send: on a bound that left out what waits behind held replies, the first read took
    ~400 of them (16 KB), the N first held, the rest rejected and queued behind them (2.3 MB in check 28)."""
    target, stats = server
    a = Conn(target.port, timeout=30)
    peak = Peak(stats)
    a.s.sendall(b"".join(cmd("SET", f"k{i}", "v") for i in range(SMALL)))
    replies = [a.reply() for _ in range(SMALL)]
    top = peak.stop()
    assert top <= 1.2 * N, f"held + behind + pending peaked at {top} over the bound {N}"
    assert len(replies) == SMALL and all(r == b"+OK" or r.startswith(b"-ERR unknown command") for r in replies)
    assert stats.snapshot()["paused_reads"] > 0


@pytest.mark.parametrize("server", [("pause", N, 250)], indirect=True)
def test_pause_with_mixed_sizes_stays_under_the_bound(server):
    """20 SETs of 16 KB, then 400 small ones on another connection: a budget at the mean request size (~13 KB)
    let one read take every small one (~400 against N = 40)."""
    target, stats = server
    big, a = Conn(target.port, timeout=30), Conn(target.port, timeout=30)
    peak = Peak(stats)
    big.s.sendall(b"".join(cmd("SET", f"big{i}", b"x" * 16384) for i in range(20)))
    wait_held(stats, 1)
    a.s.sendall(b"".join(cmd("SET", f"k{i}", "v") for i in range(SMALL)))
    replies = [a.reply() for _ in range(SMALL)] + [big.reply() for _ in range(20)]
    top = peak.stop()
    assert top <= 1.2 * N, f"held + behind + pending peaked at {top} over the bound {N}"
    assert replies == [b"+OK"] * (SMALL + 20)
    assert a.call("DBSIZE") == b":%d" % (SMALL + 20)


@pytest.mark.parametrize("server", [("pause", 2, 20)], indirect=True)
def test_blocked_commands_at_the_bound_do_not_stop_the_server(server):
    """BLPOP, WAIT 1 0 and WAITAOF 0 1 0 (no replica: blocked for ever) are three pending commands over a bound
    of 2: counted, pause stopped reading every client, the LPUSH that releases the BLPOP among them."""
    target, stats = server
    b, w, wa = Conn(target.port), Conn(target.port), Conn(target.port)
    b.s.sendall(cmd("BLPOP", "q", "0"))
    w.s.sendall(cmd("WAIT", "1", "0"))
    deadline = time.monotonic() + 5
    while (stats.gauges() or {}).get("pending_now", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert stats.gauges()["pending_now"] == 2, stats.gauges()  # at the bound
    wa.s.sendall(cmd("WAITAOF", "0", "1", "0") + cmd("PING"))  # a PING behind a blocked WAITAOF waits with it
    time.sleep(0.1)
    p = Conn(target.port, timeout=5)
    try:
        assert p.call("LPUSH", "q", "x") == b":1"
    except TimeoutError:
        pytest.fail("the server stopped reading its clients: the LPUSH that would release the BLPOP unanswered in 5 s")
    assert b.reply() == [b"q", b"x"]
    assert Conn(target.port, timeout=5).call("PING") == b"+PONG"


def _over_the_bound(target, stats) -> Conn:
    """One SET held for the fdatasync (DELAY): with N = 1, every write parsed meanwhile is over the bound."""
    holder = Conn(target.port)
    holder.s.sendall(cmd("SET", "holder", "1"))
    wait_held(stats, 1)
    return holder


@pytest.mark.parametrize("server", [("reject", 1, 1500)], indirect=True)
def test_reject_refuses_a_write_inside_multi(server):
    target, stats = server
    holder = _over_the_bound(target, stats)
    c = Conn(target.port)
    c.s.sendall(cmd("MULTI") + cmd("SET", "tx", "1") + cmd("EXEC"))
    assert c.reply() == b"+OK"
    assert c.reply().startswith(b"-ERR unknown command"), "a write queued in MULTI over the bound was let through"
    assert c.reply().startswith(b"-EXECABORT")
    assert holder.reply() == b"+OK"
    assert c.call("EXISTS", "tx") == b":0"
    assert stats.snapshot()["rejected_writes"] == 1


@pytest.mark.parametrize("server", [("reject", 1, 1500)], indirect=True)
def test_reject_refuses_a_write_on_a_connection_without_replies(server):
    target, stats = server
    holder = _over_the_bound(target, stats)
    c = Conn(target.port)
    c.s.sendall(cmd("CLIENT", "REPLY", "OFF") + cmd("SET", "quiet", "1") + cmd("CLIENT", "REPLY", "ON"))
    assert c.reply() == b"+OK"  # CLIENT REPLY ON's: the only reply
    assert holder.reply() == b"+OK"
    assert Conn(target.port).call("EXISTS", "quiet") == b":0", "a write on an unsynced connection was let through"


@pytest.mark.parametrize("server", [("reject", 1, 1500)], indirect=True)
def test_reject_refuses_a_write_whose_name_is_split_across_reads(server):
    target, stats = server
    holder = _over_the_bound(target, stats)
    c = Conn(target.port)
    for key, cut in (("s1", 9), ("s2", 10), ("s3", 11), ("s4", 12)):  # inside the name, after it, in its CRLF
        whole = cmd("SET", key, "1")
        assert whole[8:11] == b"SET"
        c.s.sendall(whole[:cut])
        time.sleep(0.05)  # the server reads the first part alone
        c.s.sendall(whole[cut:])
        r = c.reply()
        assert r.startswith(b"-ERR unknown command"), (cut, r)
    assert holder.reply() == b"+OK"
    assert c.call("EXISTS", "s1", "s2", "s3", "s4") == b":0"
    assert stats.snapshot()["rejected_writes"] == 4
