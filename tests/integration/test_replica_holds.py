"""The offload's holds around replicas (issue 71, items 5-7), against a real valkey-server with the shim
preloaded, each claim against a truth the test keeps itself: the bytes a replica (a socket the test drives as
valkey's replica protocol does) read off its link, the injected fdatasync delay, the kernel's count of a
thread's context switches."""
import os
import socket
import threading
import time

import pytest

pytestmark = pytest.mark.integration


def _cmd(*args) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class FakeReplica:
    """A replica's link to the primary, spoken by hand: REPLCONF, PSYNC, the full sync's payload read past, then
    the stream read only when told (a small receive buffer: the primary's writes to it run short). `got` counts
    every byte read since PSYNC was sent, as a replica counts its link."""

    def __init__(self, port: int, rcvbuf: int = 4096):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            self._sync(port)
        except BaseException:
            self.sock.close()
            raise
        # a diskless sync's stream starts at the replica's first ACK once the primary has it online: ACKs as a
        # replica sends them (every second; here more often, the stream starts sooner)
        self.stop = threading.Event()
        self.acks = threading.Thread(target=self._ack, daemon=True)
        self.acks.start()
        time.sleep(0.5)

    def _sync(self, port: int):
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(20)
        self.port = self.sock.getsockname()[1]
        self.got, self.buf = 0, b""
        for args in (("REPLCONF", "listening-port", "1"), ("REPLCONF", "capa", "eof", "capa", "psync2")):
            self.sock.sendall(_cmd(*args))
            assert self._line(count=False).startswith(b"+OK")
        self.sock.sendall(_cmd("PSYNC", "?", "-1"))
        assert self._line().startswith(b"+FULLRESYNC")
        head = self._line()
        while head == b"":  # the primary's keep-alive newlines while it prepares the payload
            head = self._line()
        if head.startswith(b"$EOF:"):
            mark = head[5:45]
            while not self.buf.endswith(mark):
                self.buf = self.buf[-40:] + self._recv()
        else:
            left = int(head[1:])
            while left > 0:
                left -= len(self._recv(min(left, 65536)))
        self.buf = b""

    def _ack(self):
        while not self.stop.wait(0.1):
            try:
                self.sock.sendall(_cmd("REPLCONF", "ACK", "0"))
            except OSError:
                return

    def _recv(self, n: int = 65536, count: bool = True) -> bytes:
        b = self.sock.recv(n)
        if not b:
            raise ConnectionError("the primary closed the link")
        self.got += len(b) if count else 0
        return b

    def _line(self, count: bool = True) -> bytes:
        while b"\n" not in self.buf:
            self.buf += self._recv(1, count)  # byte by byte: nothing past the line is taken
        line, self.buf = self.buf.split(b"\n", 1)
        return line.rstrip(b"\r")

    def drain(self, quiet_s: float = 1.0) -> None:
        """Read until nothing came for quiet_s."""
        self.sock.settimeout(quiet_s)
        try:
            while True:
                self._recv()
        except (socket.timeout, TimeoutError):
            pass

    def close(self):
        self.stop.set()
        self.acks.join(timeout=5)
        self.sock.close()


def _offload_primary(replicas: str, delay: str | None = None, config: dict | None = None):
    """A primary under the durable virtual offload (the shim preloaded), and its offload file."""
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers import offload as voff
    from valkeytrace.tracers.emulation import parse_fsync_delay, shim_library

    stats = voff.OffloadStats("durable", replicas=replicas)
    env = {**os.environ, "LD_PRELOAD": shim_library(), **stats.env()}
    if delay:
        env["VALKEYTRACE_FSYNC_DELAY"] = parse_fsync_delay(delay)["env"]
    try:
        primary = EmbeddedServer(appendfsync="always", io_threads=1, env=env,
                                 server_config={"repl-diskless-sync-delay": "0", **(config or {})})
    except BaseException:
        stats.close()
        raise
    stats.load_commands(primary.client())
    return primary, stats


def _link(stats, port: int):
    for link in stats.shared[0].links:
        if int(link.port) == port:
            return link
    return None


def test_a_short_write_on_a_replica_link_offsets_equal_the_replica_s():
    """The primary's count of a link's stream (its `sent`, what the committed offset is measured in) is the bytes
    the replica read: writes the kernel takes only in part (a replica with a 4 KB receive buffer that does not
    read while 8 MB of stream is written) are counted as the kernel took them, not once per attempt."""
    primary, stats = _offload_primary("immediate")
    replica = None
    try:
        replica = FakeReplica(primary.port)
        c = primary.client()
        pipe = c.pipeline(transaction=False)
        for i in range(2000):
            pipe.set(f"key:{i}", os.urandom(2048).hex())  # 4 KB of stream each
        pipe.execute()
        time.sleep(0.5)  # the server's writes to the link run into the full socket
        stream = int(stats.shared[0].stats.stream_bytes)
        replica.drain()
        link = _link(stats, replica.port)
        assert link is not None, "the primary published no link for the replica"
        # the independent truth: what came off the socket since PSYNC (2,000 SETs: > 8 MB)
        assert replica.got > 8_000_000, replica.got
        assert int(link.sent) == replica.got, (int(link.sent), replica.got, stream)
        assert int(stats.shared[0].stats.stream_bytes) == replica.got
    finally:
        if replica is not None:
            replica.close()
        primary.stop()
        stats.close()
