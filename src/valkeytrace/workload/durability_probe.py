"""The durability probe of record --replicas: beside the #4029 load, a low-rate side client on its
own connection sends `SET` then `WAITAOF 1 N <timeout>` and times, per probe, when the SET was
answered and when the WAITAOF was (a write durable on the primary and on N replicas). It runs in
each measured window only, on a thread of its own, at RATE_PER_S, over a small set of keys of its
own (vtprobe:0..KEYS-1), so that it adds a few percent to the load and nothing to the keyspace.

A run keeps its probes by column (`run.replication`): `sent_ns` (CLOCK_MONOTONIC, the kernel's
bpf_ktime_get_ns clock on this host), `set_us` (the SET's reply after its send), `waitaof_us` (the
WAITAOF's reply after the SET's send: the write durable everywhere), `acked` (replicas the WAITAOF
counted)."""
from __future__ import annotations

import socket
import threading
import time

RATE_PER_S = 150
KEYS = 64
TIMEOUT_MS = 2000


def _command(*args: str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Reader:
    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the server closed the probe's connection")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def reply(self):
        """One RESP reply: a simple string, an error (raised), an integer or an array of them."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise ConnectionError(f"the server answered the probe with an error: {rest.decode(errors='replace')}")
        if kind == b":":
            return int(rest)
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        return rest.decode(errors="replace")


class Prober:
    def __init__(self, host: str, port: int, replicas: int, rate_per_s: float = RATE_PER_S):
        self.host, self.port, self.replicas, self.rate = host, port, replicas, rate_per_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._rows: list[tuple[int, float, float, int]] = []
        self._error: str | None = None

    def begin(self) -> None:
        self._stop.clear()
        self._rows, self._error = [], None
        self._thread = threading.Thread(target=self._loop, name="vt-durability-probe", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            with socket.create_connection((self.host, self.port), timeout=TIMEOUT_MS / 1000 + 5) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                r, i, period = _Reader(s), 0, 1.0 / self.rate
                waitaof = _command("WAITAOF", "1", str(self.replicas), str(TIMEOUT_MS))
                next_at = time.monotonic()
                while not self._stop.is_set():
                    t0 = time.monotonic_ns()
                    s.sendall(_command("SET", f"vtprobe:{i % KEYS}", str(t0)))
                    r.reply()
                    t1 = time.monotonic_ns()
                    s.sendall(waitaof)
                    local_replicas = r.reply()
                    t2 = time.monotonic_ns()
                    acked = int(local_replicas[1]) if isinstance(local_replicas, list) and len(local_replicas) > 1 else 0
                    self._rows.append((t0, (t1 - t0) / 1e3, (t2 - t0) / 1e3, acked))
                    i += 1
                    next_at += period
                    self._stop.wait(max(0.0, next_at - time.monotonic()))
        except (OSError, ConnectionError, ValueError) as exc:
            self._error = str(exc) or type(exc).__name__

    def end(self) -> dict:
        """The window's probes, by column (module docstring)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT_MS / 1000 + 10)
        rows = list(self._rows)
        out = {"rate_per_s": self.rate, "replicas": self.replicas,
               "sent_ns": [r[0] for r in rows], "set_us": [round(r[1], 1) for r in rows],
               "waitaof_us": [round(r[2], 1) for r in rows], "acked": [r[3] for r in rows]}
        if self._error:
            out["error"] = self._error
        return out
