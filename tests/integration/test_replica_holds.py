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

    def read_until(self, marker: bytes, timeout_s: float = 20) -> None:
        """Read the stream until marker came."""
        seen, deadline = b"", time.monotonic() + timeout_s
        while marker not in seen and time.monotonic() < deadline:
            seen = seen[-len(marker):] + self._recv()
        assert marker in seen, f"{marker!r} never came on the link"

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


# replica-blocking: each primary fdatasync takes this long, so a write stays past the committed offset as long
DELAY_S = 3.0


def _blocking_replica(primary, stats):
    """A replica of primary with the shim preloaded under replica-blocking (it reads the primary's committed
    offsets from its offload file), as record --offload-replicas replica-blocking launches it."""
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers.emulation import shim_library

    env = {**os.environ, "LD_PRELOAD": shim_library(), "VALKEYTRACE_REPLICA_COMMIT": stats.path}
    return EmbeddedServer(appendfsync="always", io_threads=1, env=env,
                          server_config={"replicaof": f"127.0.0.1 {primary.port}"})


def _synced(replica, timeout_s: float = 30) -> float:
    """Seconds until the replica's link is up with its full sync done."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        info = replica.client().info("replication")
        if info.get("master_link_status") == "up" and not int(info.get("master_sync_in_progress", 1)):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError("the replica did not sync")


def _set_in_background(primary, key: str) -> tuple[threading.Thread, float]:
    """SET key on the primary (its reply waits for its fdatasync: DELAY_S); the time it was sent."""
    c = primary.client()
    t = threading.Thread(target=c.set, args=(key, "v"), daemon=True)
    sent = time.monotonic()
    t.start()
    return t, sent


def _get_replies(port: int, key: str, n: int, timeout_s: float) -> list[float | None]:
    """n connections each send GET key at once; when each reply came (None: none within timeout_s)."""
    import selectors

    sel, socks, when, buf = selectors.DefaultSelector(), [], [None] * n, [b""] * n
    try:
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(_cmd("GET", key))
            s.setblocking(False)
            socks.append(s)
            sel.register(s, selectors.EVENT_READ, i)
        deadline, left = time.monotonic() + timeout_s, n
        while left and time.monotonic() < deadline:
            for k, _ in sel.select(timeout=0.2):
                i = k.data
                buf[i] += k.fileobj.recv(64)
                if buf[i].endswith(b"v\r\n") and when[i] is None:
                    when[i], left = time.monotonic(), left - 1
                    sel.unregister(k.fileobj)
        return when
    finally:
        sel.close()
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def blocking_pair():
    """A primary whose every fdatasync takes DELAY_S, and its replica under replica-blocking, synced (with room for
    4,097 more connections: this process's fd limit raised to its hard limit, which the servers inherit)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4097 + 512
    if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    primary, stats = _offload_primary("replica-blocking", delay=f"{DELAY_S}s")
    replica = None
    try:
        replica = _blocking_replica(primary, stats)
        _synced(replica)
        yield primary, replica
    finally:
        for s in (replica, primary):
            if s is not None:
                s.stop()
        stats.close()


def test_4097_held_connections_all_released(blocking_pair):
    """4,097 clients of the replica read a key written past the committed offset: each reply is held, and each
    leaves once the primary's fdatasync (DELAY_S) made the write durable; none is left behind."""
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 4097 + 512:
        # root (CI) can always raise it: there a low limit is a failure, not a skip
        assert os.geteuid() != 0, resource.getrlimit(resource.RLIMIT_NOFILE)
        pytest.skip("the fd limit leaves no room for 4,097 connections")
    primary, replica = blocking_pair
    setter, sent = _set_in_background(primary, "many")
    time.sleep(0.2)  # the stream carried the SET to the replica
    when = _get_replies(replica.port, "many", 4097, timeout_s=DELAY_S + 20)
    setter.join(timeout=30)
    answered = [w for w in when if w is not None]
    assert len(answered) == 4097, f"{4097 - len(answered)} of 4,097 held replies never released"
    assert min(answered) >= sent + DELAY_S - 0.2, (min(answered) - sent)  # held until the write was durable


def _voluntary_switches(pid: int) -> int:
    """The kernel's count of every thread's voluntary context switches (each sleep and wake of each)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):
            pass
    return total


def test_the_release_thread_sleeps_while_a_reply_is_held(blocking_pair):
    """While a reply waits for the committed offset, the replica's release thread sleeps until the offset moves
    (a futex word the primary bumps), not on a timer: the replica's threads together switch out at most a few
    dozen times a second (the server's own cron and link), where a 20 µs poll switches out thousands of times."""
    primary, replica = blocking_pair
    setter, sent = _set_in_background(primary, "idle")
    time.sleep(0.2)
    with socket.create_connection(("127.0.0.1", replica.port), timeout=10) as s:
        s.sendall(_cmd("GET", "idle"))
        time.sleep(0.3)
        before, t0 = _voluntary_switches(replica.pid), time.monotonic()
        time.sleep(1.5)
        switches, took = _voluntary_switches(replica.pid) - before, time.monotonic() - t0
        s.setblocking(False)
        try:
            early = s.recv(64)
        except BlockingIOError:
            early = b""
        assert not early and time.monotonic() < sent + DELAY_S, "the reply was not held over the whole window"
        s.settimeout(DELAY_S + 10)
        assert s.recv(64).endswith(b"v\r\n")  # released once durable
    setter.join(timeout=30)
    assert switches / took <= 100, f"{switches} voluntary context switches in {took:.2f} s while one reply was held"


def test_a_read_of_a_snapshot_key_under_replica_blocking_waits():
    """A replica that joins while a write is not yet durable on the primary loads it from the full sync's
    snapshot (the primary's memory): a read of it waits, as a read of it from the stream would, until the
    primary's fdatasync (DELAY_S, begun after the SET was sent) made it durable."""
    primary, stats = _offload_primary("replica-blocking", delay=f"{DELAY_S}s")
    replica = None
    try:
        primary.client().set("before", "v")  # one job done: the next SET's job starts at once
        setter, sent = _set_in_background(primary, "snap")
        time.sleep(0.2)
        replica = _blocking_replica(primary, stats)
        took = _synced(replica)
        (came,) = _get_replies(replica.port, "snap", 1, timeout_s=DELAY_S + 10)
        setter.join(timeout=30)
        assert came is not None, "the read of the snapshot's key was never answered"
        assert came >= sent + DELAY_S - 0.2, f"answered {came - sent:.2f} s after the SET (synced in {took:.2f} s)"
    finally:
        for s in (replica, primary):
            if s is not None:
                s.stop()
        stats.close()


class AofWatch:
    """When each marker first appears in the primary's AOF file (read as it grows, every 2 ms)."""

    def __init__(self, workdir: str, markers: list[bytes]):
        self.workdir, self.markers, self.seen = workdir, markers, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        import glob

        data = b""
        while not self.stop.wait(0.002):
            for path in glob.glob(os.path.join(self.workdir, "appendonlydir", "*.incr.aof")):
                with open(path, "rb") as f:
                    data = f.read()
                for m in self.markers:
                    if m in data and m not in self.seen:
                        self.seen[m] = time.monotonic()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)


def _primary_end(pid: int, port: int, peer: int) -> socket.socket:
    """The primary's own end of its link to the replica at `peer` (its fd, duplicated into this process with
    pidfd_getfd): a socket option set on it is set on the primary's socket."""
    import ctypes

    import psutil

    fd = next(c.fd for c in psutil.Process(pid).net_connections(kind="tcp")
              if c.laddr and c.raddr and c.laddr.port == port and c.raddr.port == peer)
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mine = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd (438 on every architecture)
        if mine < 0:  # root (CI) may take another process's fd: there a refusal is a failure, not a skip
            assert os.geteuid() != 0, os.strerror(ctypes.get_errno())
            pytest.skip(f"pidfd_getfd on the server's socket: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(pidfd)
    return socket.socket(fileno=mine)


WITNESS_DELAY_S = 2.0  # each primary fdatasync in the witness below


def test_committed_holds_a_stream_write_made_before_the_aof_was_written():
    """--offload-replicas committed, a targeted witness: the server writes to a replica's link from its write
    handler, inside the event loop, after it ran a SET whose AOF bytes it writes only in beforeSleep. A link kept
    full (a PUBLISH: no AOF bytes, written at once, in part: the primary's send buffer made small), a SET (A)
    that starts a 2 s fdatasync, then, while DEBUG SLEEP keeps the main thread busy, a second SET (B) and the
    primary's send buffer made large (the link writable): the loop runs B, then the link's write handler, which
    writes B's stream bytes before B's AOF bytes were even queued (strace: the read of B, then the writev to
    the link, no AOF write between). B must reach the replica only once its own fdatasync ended: no sooner
    than 2 s after its bytes first appeared in the AOF file (the truth: the file, read as it grows, and the
    injected delay; 0.5 s allowed for reading it late)."""
    primary, stats = _offload_primary("committed", delay=f"{WITNESS_DELAY_S}s", config={"enable-debug-command": "yes"})
    replica = watch = None
    socks = []
    try:
        replica = FakeReplica(primary.port)
        c = primary.client()
        c.set("warm", "x")
        replica.read_until(b"warm")
        replica.stop.set()  # no more ACKs: the link's fd becomes ready only when its socket takes bytes again
        link = _primary_end(primary.pid, primary.port, replica.port)
        socks.append(link)
        link.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)  # the primary's send buffer: small
        mark_a, mark_b = b"marker-A-" + os.urandom(6).hex().encode(), b"marker-B-" + os.urandom(6).hex().encode()
        watch = AofWatch(primary.workdir, [mark_a, mark_b])
        c.publish("ch", "p" * 1_000_000)  # nothing waits for the AOF: written now, in part; the server keeps the rest
        time.sleep(0.2)
        writer, busy = (socket.create_connection(("127.0.0.1", primary.port)) for _ in range(2))
        socks += [writer, busy]
        writer.sendall(_cmd("SET", "a", mark_a))  # its fdatasync: WITNESS_DELAY_S from now
        time.sleep(0.1)
        busy.sendall(_cmd("DEBUG", "SLEEP", "0.5"))  # the main thread busy for 500 ms
        time.sleep(0.05)
        writer.sendall(_cmd("SET", "b", mark_b))  # ready first: run first when the sleep ends
        time.sleep(0.1)
        link.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)  # room for everything: the link is writable
        replica.sock.settimeout(20)
        replica.read_until(mark_b)  # the link drains from now on
        got_b = time.monotonic()
        deadline = time.monotonic() + 10
        while mark_b not in watch.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mark_b in watch.seen, "B never reached the AOF file"
        early = watch.seen[mark_b] + WITNESS_DELAY_S - got_b
        assert early <= 0.5, f"B reached the replica {early:.2f} s before its fdatasync could have ended"
    finally:
        if watch is not None:
            watch.close()
        for s_ in socks:
            s_.close()
        if replica is not None:
            replica.close()
        primary.stop()
        stats.close()
