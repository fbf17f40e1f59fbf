"""The floor the open-loop client keeps per key for --verify-durability (csrc/vt_load.c, csrc/vt_inflight.c),
against a scripted server that answers in an order the test chooses and sees every SET's sequence in its
value (the truth the floor is checked against): once a SET is acknowledged, the key holds it or a write
that may have run after it, a SET of the key still unanswered on another connection as it was sent. So the
floor is the oldest of it and those; a write answered before it was sent, or queued before it on its own
connection (the server runs a connection's requests in order), cannot be the value that stays.

The client is the real C loop (the cffi module) on a uniform schedule of a few SETs of one key, far apart
(~190 ms), so each arrives alone and the script's order is the order things happened."""
import selectors
import socket
import threading

import numpy as np

from valkeytrace._native import ffi, lib
from valkeytrace.workload.durability_check import compare_acked

HEAD = b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000000\r\n$16\r\n"
REQUEST = len(HEAD) + 16 + 2  # value_size 16: the value is the sequence, nothing else


class ScriptedServer:
    """Accepts the client's connections; on the i-th SET to arrive (counting from 1) runs script[i]: a list
    of (n, reply) answering the n-th SET on its connection (a connection's replies go in its order)."""

    def __init__(self, script: dict):
        self.script, self.arrived = script, []  # arrived: (connection, sequence) in arrival order
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sel, self.stop = selectors.DefaultSelector(), False
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        bufs, conns = {}, []
        while not self.stop:
            for key, _ in self.sel.select(0.05):
                if key.fileobj is self.sock:
                    c, _ = self.sock.accept()
                    conns.append(c)
                    bufs[c] = b""
                    self.sel.register(c, selectors.EVENT_READ)
                    continue
                c = key.fileobj
                data = c.recv(65536)
                if not data:
                    self.sel.unregister(c)
                    continue
                bufs[c] += data
                while len(bufs[c]) >= REQUEST:
                    req, bufs[c] = bufs[c][:REQUEST], bufs[c][REQUEST:]
                    assert req.startswith(HEAD), req
                    self.arrived.append((c, int(req[len(HEAD):len(HEAD) + 16], 16)))
                    for n, reply in self.script.get(len(self.arrived), []):
                        self.arrived[n - 1][0].sendall(reply)
        for c in conns:
            c.close()
        self.sock.close()

    def close(self):
        self.stop = True
        self.thread.join(5)


def run_client(port: int, n: int, conns: int, hold: int) -> tuple[int, int]:
    """n SETs of key 0 over `conns` connections (hold 1: one in flight each; 0: pipelined): (the key's floor as
    the client kept it, SETs acknowledged)."""
    host = ffi.new("char[]", b"127.0.0.1")
    acked = ffi.new("uint64_t[]", 1)
    cfg = ffi.new("struct vt_load_config *")
    cfg.host, cfg.port, cfg.op, cfg.keyspace, cfg.value_size = host, port, lib.VT_LOAD_SET, 1, 16
    cfg.rate, cfg.arrival, cfg.duration_ns = 4.0, lib.VT_LOAD_UNIFORM, int(n / 4.0 * 1e9)
    cfg.conns, cfg.max_conns, cfg.hold = conns, conns, hold
    cfg.grace_ns, cfg.drain_ns, cfg.late_ns, cfg.seed, cfg.marker_fd = int(2e9), int(2e9), int(1e9), 7, -1
    cfg.acked = acked
    res = ffi.new("struct vt_load_result *")
    lib.vt_load_run(cfg, res)
    assert not res.error or res.answered == n, ffi.string(res.message)
    return int(acked[0]), int(res.acked)


def scripted(script: dict, n: int, conns: int, hold: int):
    server = ScriptedServer(script)
    try:
        floor, acked = run_client(server.port, n, conns, hold)
    finally:
        server.close()
    return floor, acked, server.arrived


class Reload:
    """A reload that holds one value of key 0: its sequence."""

    def __init__(self, seq: int):
        self.value = b"%016x" % seq

    def mget(self, keys):
        return [self.value for _ in keys]


def test_a_write_answered_before_the_next_was_sent_is_no_floor():
    """A and B sent (two connections), A answered, C sent and answered, B never: the reload holding A
    (B and C lost) is a loss: C's floor is B, A ran before C was sent. The floor once stayed at A."""
    ok, lost = b"+OK\r\n", b"-ERR lost\r\n"
    floor, acked, arrived = scripted({2: [(1, ok)], 3: [(3, ok), (2, lost)]}, n=3, conns=3, hold=1)
    (ca, a), (cb, b), (cc, c) = arrived
    assert len({ca, cb}) == 2 and cc is not cb, "A and B on two connections, C beside B"
    assert acked == 2 and floor == b, (floor, a, b, c)
    assert compare_acked(Reload(a), np.array([floor], dtype=np.uint64))[1] == 1  # the reload holding A: reported
    assert compare_acked(Reload(b), np.array([floor], dtype=np.uint64))[1] == 0  # B may have run after C: kept


def test_a_write_queued_before_on_the_same_connection_is_no_floor():
    """A and B pipelined on one connection, both answered: B ran after A (a connection's requests run in
    order), so a reload holding A lost B. The floor once was A (every write in flight counted)."""
    ok = b"+OK\r\n"
    floor, acked, arrived = scripted({2: [(1, ok), (2, ok)]}, n=2, conns=1, hold=0)
    (ca, a), (cb, b) = arrived
    assert ca is cb and acked == 2 and floor == b, (floor, a, b)


def test_writes_the_server_may_have_reordered_keep_the_older_floor():
    """A and B on two connections, B answered first, then A: the server may have run A last (it did, here:
    its reply came last), so the key may hold A: the floor is A, never above the truth."""
    ok = b"+OK\r\n"
    floor, acked, arrived = scripted({2: [(2, ok), (1, ok)]}, n=2, conns=2, hold=1)
    (ca, a), (cb, b) = arrived
    assert ca is not cb and acked == 2 and floor == a, (floor, a, b)
