"""What the server holds in memory over a window, sampled at SAMPLE_HZ: runs[].memory.

Three sources, each read where it can answer while the server's main thread cannot:
- the kernel: the server's resident set (/proc/PID/statm), whatever the server is doing;
- the virtual offload's shared file (tracers/offload.py, under --emulate-offload): the replies it holds
  (count and bytes), the keys written and not yet durable, the AOF bytes queued in the shim;
- the server's INFO (memory, persistence): used_memory, valkey's own AOF buffer (`aof_buffer_length`,
  what it has not written yet: under everysec with the fsync stalled it postpones the write up to 2 s),
  the normal clients' output buffers, `aof_delayed_fsync`. INFO is answered by the main thread, so it is
  asked on a thread of its own: a main thread stalled in fdatasync (appendfsync always) answers late, and
  the samples of that time carry the last answer with its age (`info_age_s`), never a made-up figure.
INFO is asked INFO_HZ times a second, the other sources SAMPLE_HZ; attached (ATTACHED_HZ), both once a
second on one thread, the sample after each answer.

Each sample: [t_s, held_replies, held_bytes, dirty_keys, aof_buffer_bytes, rss_kb, used_memory,
clients_normal_bytes, info_age_s, behind_replies] (COLUMNS); a figure no source gives is None. held_replies
wait for their AOF bytes to be durable; behind_replies (a rejected write's error, a PING) wait only behind
them on their connection, since replies leave in order; held_bytes is both, as the client's output buffer
would hold them.
"""
from __future__ import annotations

import os
import threading
import time

SAMPLE_HZ = 20
INFO_HZ = 10        # INFO asks the main thread (two sections, ~2.5 kB of reply): half the samples' rate
ATTACHED_HZ = (1, 1)  # a server someone else runs (record --attach): a wakeup costs the tracer ~0.5 ms under load (#60)
INFO_STALE_S = 0.5  # an INFO answer older than this (or 1.5 of its periods) is not a figure of the sample's moment
COLUMNS = ("t_s", "held_replies", "held_bytes", "dirty_keys", "aof_buffer_bytes", "rss_kb", "used_memory",
           "clients_normal_bytes", "info_age_s", "behind_replies")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


class Statm:
    """The process's resident set in kB (statm's second field), from one fd kept open: a read of it is one
    syscall (an open, read and close each time cost 3x that on this VM, docs/performance.md, stop 67)."""

    def __init__(self, pid: int):
        try:
            self.fd: int | None = os.open(f"/proc/{pid}/statm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = None

    def rss_kb(self) -> int | None:
        """None once the process is gone."""
        if self.fd is None:
            return None
        try:
            return int(os.pread(self.fd, 256, 0).split()[1]) * PAGE_KB
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


INFO_KEYS = ("used_memory", "mem_clients_normal", "aof_buffer_length", "aof_delayed_fsync")
INFO_SECTIONS = (b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n", b"*2\r\n$4\r\nINFO\r\n$11\r\npersistence\r\n")


def connector(host: str, port: int, timeout_s: float = 2.0):
    """A function that opens the sampler's own connection (a plain socket: a client library's INFO
    parsing cost the recording process ~1% of a core at 10 Hz, this ~0.4%)."""
    import socket

    return lambda: socket.create_connection((host, port), timeout=timeout_s)


def _bulk(sock, buf: bytes) -> tuple[bytes, bytes]:
    """(one bulk reply's payload, what follows it) read from sock after buf."""
    while b"\r\n" not in buf:
        got = sock.recv(65536)
        if not got:
            raise OSError("the server closed the connection")
        buf += got
    head, rest = buf.split(b"\r\n", 1)
    if not head.startswith(b"$"):
        raise ValueError(f"unexpected INFO reply {head[:40]!r}")
    n = int(head[1:])
    while len(rest) < n + 2:
        got = sock.recv(65536)
        if not got:
            raise OSError("the server closed the connection")
        rest += got
    return rest[:n], rest[n + 2:]


def ask_info(sock) -> dict[str, int]:
    """INFO memory, then INFO persistence, each in a request of its own sent after the previous reply: the
    second is read at the start of a loop iteration (after one reply was written), so under appendfsync
    always it does not see the buffer an iteration holds between running its writes and flushing them (a
    stall's backlog, for a few milliseconds); everysec's postponed buffer lasts the stall and is seen."""
    out: dict[str, int] = {}
    for request in INFO_SECTIONS:
        sock.sendall(request)
        payload, rest = _bulk(sock, b"")
        if rest:
            raise ValueError("more than one reply")
        for line in payload.split(b"\r\n"):
            key, _, value = line.partition(b":")
            name = key.decode(errors="replace")
            if name in INFO_KEYS:
                out[name] = int(value)
    return out


class MemorySampler:
    """Samples one window; start() at its begin, stop() at its end returns runs[].memory."""

    def __init__(self, pid: int, connect, offload=None, stalls=None, hz: int = SAMPLE_HZ, info_hz: int = INFO_HZ):
        """connect: opens a socket to the server (connector())."""
        self.pid, self.connect, self.offload, self.period = pid, connect, offload, 1.0 / hz
        self.info_period = 1.0 / info_hz
        self.stale_s = max(INFO_STALE_S, 1.5 * self.info_period)  # an answer older is not the sample's moment's
        self.stalls = stalls  # tracers.stalls.StallLog: the window's injected stalls kept beside the samples
        self.samples: list[list] = []
        self.info: tuple[float, dict] | None = None  # (monotonic time of the answer, its fields)
        self.delayed_fsync: list[int] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.t0 = 0.0
        self._statm: Statm | None = None

    def start(self) -> None:
        """Two threads, the samples' and INFO's; one when both have the same rate (attached: each wakeup of
        the tracer costs it ~1 ms of CPU under load on this VM), a sample then taken after each answer."""
        self._statm = Statm(self.pid)
        self.t0 = time.monotonic()
        jobs = (((self._sample, "vt-memory"), (self._ask_info, "vt-memory-info")) if self.info_period != self.period
                else ((lambda: self._ask_info(sample=True), "vt-memory"),))
        for fn, name in jobs:
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _ask_info(self, sample: bool = False) -> None:
        sock = None
        while not self._stop.is_set():
            try:
                sock = sock or self.connect()
                info = ask_info(sock)
                self.info = (time.monotonic(), info)
                self.delayed_fsync.append(int(info.get("aof_delayed_fsync") or 0))
            except (OSError, ValueError):  # a server busy past the timeout, or gone: the samples say how old
                if sock is not None:
                    sock.close()
                sock = None
            if sample:
                self.samples.append(self._row())
            self._stop.wait(self.info_period)
        if sock is not None:
            sock.close()

    def _row(self) -> list:
        now = time.monotonic()
        g = self.offload.gauges() if self.offload is not None else None
        info_t, info = self.info if self.info else (None, {})
        age = round(now - info_t, 3) if info_t is not None else None
        fresh = age is not None and age <= self.stale_s
        valkey_aof = int(info.get("aof_buffer_length") or 0) if fresh else None
        shim_aof = g["aof_queued_bytes"] if g else 0
        return [round(now - self.t0, 3),
                g["held_now"] if g else None, g["held_bytes_now"] if g else None, g["dirty_keys_now"] if g else None,
                None if valkey_aof is None else valkey_aof + shim_aof, self._statm.rss_kb() if self._statm else None,
                int(info["used_memory"]) if fresh and "used_memory" in info else None,
                int(info["mem_clients_normal"]) if fresh and "mem_clients_normal" in info else None, age,
                g["behind_now"] if g else None]

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self._row())
            self._stop.wait(self.period)

    def stop(self) -> dict:
        """runs[].memory: the samples, their columns and sources, and how many fsyncs valkey delayed."""
        self._stop.set()
        for t in self._threads:
            t.join(3)
        self.samples.append(self._row())
        if self._statm is not None:
            self._statm.close()
        d = self.delayed_fsync
        stalls = self.stalls.between(self.t0, time.monotonic()) if self.stalls is not None else None
        return {"hz": round(1 / self.period), "columns": list(COLUMNS), "samples": self.samples, "stalls": stalls,
                "aof_delayed_fsync": (d[-1] - d[0]) if len(d) > 1 else None,
                "sources": {"rss_kb": "/proc/PID/statm", "held_replies": "the virtual offload's shared file"
                            if self.offload is not None else None,
                            "aof_buffer_bytes": "INFO persistence aof_buffer_length"
                            + (" + the shim's AOF queue" if self.offload is not None else ""),
                            "used_memory": "INFO memory"}}
