"""The simulation's actors besides the server (pipeline/sim.py): the event queue, a CPU that client
processes share, the stalls other tasks put on a CPU, and the clients themselves.

- A closed-loop client process is one single-threaded event loop (redis-benchmark, valkey-benchmark): a
  pass reads every reply that has arrived (recording its latency from the request's write) and writes
  the next request of every connection read in the pass before (a reply's read registers the write
  event, which the next pass serves).
- An open-loop client process (record --rate: csrc/vt_load.c) sends each request when it is due (a
  Poisson or uniform schedule) on a connection of its own, and times it from that due moment; a pass
  reads the replies that have arrived and sends what has come due. A request due in the window and not
  answered by the end of the drain is not counted: the achieved rate falls below the offered one.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Any

import numpy as np

_DRAWS = 4096


class Draws:
    """Pre-drawn samples of one Sampler, refilled as used."""

    def __init__(self, sampler, rng):
        self.sampler, self.rng, self.buf, self.i = sampler, rng, [], 0

    def next(self) -> float:
        if self.i >= len(self.buf):
            self.buf, self.i = self.sampler.draws(self.rng, _DRAWS).tolist(), 0
        v = self.buf[self.i]
        self.i += 1
        return v


class Uniform:
    """Per-request draws (a request's key, the jitter's coin) in blocks from a stream of their own: one
    numpy call per draw cost 1.5 µs, a third of a prediction's CPU (2026-12-07)."""

    def __init__(self, rng: np.random.Generator, high: int = 0):
        self.rng, self.high, self.i = rng, high, _DRAWS
        self.buf: list = []

    def next(self):
        if self.i >= _DRAWS:
            self.buf = (self.rng.integers(self.high, size=_DRAWS) if self.high else self.rng.random(_DRAWS)).tolist()
            self.i = 0
        v = self.buf[self.i]
        self.i += 1
        return v


class Noise:
    """One CPU's stalls: a Poisson process of intervals the pipeline's thread on it does not run."""

    def __init__(self, interference, rng):
        self.rate = interference.rate_per_s / 1e6
        self.draws = Draws(interference.stall, rng) if self.rate else None  # used only with a rate
        self.rng = rng
        self.start, self.end = self._next(0.0)

    def _next(self, after: float) -> tuple:
        if not self.rate:
            return float("inf"), float("inf")
        s = after + float(self.rng.exponential(1.0 / self.rate))
        assert self.draws is not None
        return s, s + self.draws.next()

    def finish(self, t: float, work: float) -> float:
        """When `work` µs of CPU started at t end (called for every piece of work: ~19M times a prediction)."""
        if not self.rate:  # no stall ever (start is infinite)
            return t + work
        while self.end <= t:
            self.start, self.end = self._next(self.start)
        while self.start < t + work:
            if self.start <= t:
                t = self.end
            else:
                work -= self.start - t
                t = self.end
            self.start, self.end = self._next(self.start)
        return t + work


class Engine:
    def __init__(self):
        self.heap: list = []
        self.seq = 0
        self.events = 0

    def at(self, t: float, fn, arg=None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, arg))

    def run(self, until: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= until:
            t, _, fn, arg = heapq.heappop(heap)
            self.events += 1
            fn(t, arg)


class CPU:
    """One CPU the client processes share: a pass at a time, first come first served."""

    def __init__(self, eng: Engine, noise: Noise):
        self.eng, self.running, self.noise = eng, False, noise
        self.queue: deque = deque()

    def want(self, proc, t: float) -> None:
        """proc wants a pass at t (or earlier than it asked before, while it has not started)."""
        if proc.state == _QUEUED or proc.state == _RUNNING or (proc.state == _WAITING and proc.want_at <= t):
            return
        proc.state, proc.want_at = _WAITING, t
        proc.token += 1
        self.eng.at(t, self._arrive, (proc, proc.token))

    def _arrive(self, t: float, arg) -> None:
        proc, token = arg
        if proc.state != _WAITING or token != proc.token:
            return
        if self.running:
            proc.state = _QUEUED
            self.queue.append(proc)
        else:
            self._start(t, proc)

    def _start(self, t: float, proc) -> None:
        self.running, proc.state = True, _RUNNING
        self.eng.at(proc.run_pass(t), self._end, proc)

    def _end(self, t: float, proc) -> None:
        self.running, proc.state = False, _IDLE
        proc.pass_end(t)
        if self.queue:
            self._start(t, self.queue.popleft())


_IDLE, _WAITING, _QUEUED, _RUNNING = range(4)


class _Client:
    """What both clients do with a reply: delayed on its way with the fitted jitter's probability, it
    joins the process's heap of arrivals, and the process wants the CPU once it is woken."""
    sim: Any
    cpu: CPU
    cost: Any
    replies: list
    seq: int

    def reply(self, conn: int, t: float) -> None:
        j = self.sim.p.jitter
        if j is not None and j.share and self.sim.coin.next() < j.share:
            t += float(self.sim.rng.exponential(j.mean_us))
        self.seq += 1
        heapq.heappush(self.replies, (t, self.seq, conn))
        self.cpu.want(self, t + self.cost.wake_us)


class ClosedClient(_Client):
    """One benchmark process: its connections, in a closed loop or sent on a schedule."""

    def __init__(self, sim, group, first_conn: int, cpu: CPU):
        self.sim, self.group, self.cpu = sim, group, cpu
        self.op = group.op
        self.conns = list(range(first_conn, first_conn + group.clients))
        self.writes: deque = deque((0.0, c) for c in self.conns)  # connections due to write
        self.replies: list = []  # heap (arrival, seq, conn)
        self.sent: dict = {}
        self.state, self.want_at, self.token = _IDLE, 0.0, 0
        self.latencies: list = []
        self.seq = 0
        self.cost = sim.p.client

    def run_pass(self, t: float) -> float:
        c, sim, op = self.cost, self.sim, self.op
        key = sim.keys.next
        # epoll's ready list, in the order the events became ready: the write events the last pass
        # registered, and the replies as they arrived
        ready = [(w, 1, conn) for w, conn in self.writes]
        while self.replies and self.replies[0][0] <= t:
            a, _, conn = heapq.heappop(self.replies)
            ready.append((a, 0, conn))
        ready.sort()
        self.writes = deque()
        warm, lat, sent, fin = sim.warm, self.latencies, self.sent, self.cpu.noise.finish
        for _, is_write, conn in ready:
            if is_write:
                t = fin(t, c.write_us)
                sent[conn] = t
                sim.arrive(t, conn, op, key())
            else:
                t = fin(t, c.read_us)
                if warm <= t < sim.end:
                    lat.append(t - sent[conn])
                self.writes.append((t, conn))
        return fin(t, c.pass_us)

    def pass_end(self, t: float) -> None:
        if self.writes or (self.replies and self.replies[0][0] <= t):
            self.cpu.want(self, t)
        elif self.replies:
            self.cpu.want(self, self.replies[0][0] + self.cost.wake_us)


class OpenClient(_Client):
    """The open-loop client process: requests due on a schedule, its latency from its due moment; a
    reply read costs read_us, a request sent write_us, as the closed loop's. Pool "fixed": `clients`
    connections, one request in flight each, a request due while all wait held until one is answered
    (the real client's default); "grow": each on a connection of its own (the real client grows its
    pool and then pipelines: no request waits for another's reply)."""

    def __init__(self, sim, group, first_conn: int, cpu: CPU):
        self.sim, self.group, self.cpu, self.op = sim, group, cpu, group.op
        self.cost = sim.p.client
        self.gap_us = 1e6 / group.rate
        self.poisson = group.arrival != "uniform"
        self.fixed = group.pool == "fixed"
        self.next_conn = 10**12 * (1 + first_conn)  # apart from every closed loop's connection numbers
        # fixed: its connections, those free, the due moments held; grow: sim.client_of filled as requests go out
        self.conns: list = list(range(first_conn, first_conn + group.clients)) if self.fixed else []
        self.free: list = list(self.conns)
        self.held: deque = deque()
        self.next_due = self._gap()
        self.replies: list = []
        self.seq = 0
        self.due: dict = {}              # conn -> (due, sent)
        self.state, self.want_at, self.token = _IDLE, 0.0, 0
        self.latencies: list = []        # from the due moment, for requests due in the window
        self.service: list = []          # from the send
        self.due_in_window = 0
        self.first_answer, self.last_answer = float("inf"), 0.0  # of those due in the window

    def _gap(self) -> float:
        return float(self.sim.rng.exponential(self.gap_us)) if self.poisson else self.gap_us

    def start(self) -> None:
        self.cpu.want(self, self.next_due)

    def run_pass(self, t: float) -> float:
        c, sim, fin = self.cost, self.sim, self.cpu.noise.finish
        warm, end = sim.warm, sim.end
        while self.replies and self.replies[0][0] <= t:
            _, _, conn = heapq.heappop(self.replies)
            t = fin(t, c.read_us)
            due, sent = self.due.pop(conn)
            if warm <= due < end:
                self.latencies.append(t - due)
                self.service.append(t - sent)
                self.first_answer = min(self.first_answer, t)
                self.last_answer = t
            if not self.fixed:
                del sim.client_of[conn]
            elif self.held:  # the oldest held request goes out on the connection just answered
                t = self._send(t, self.held.popleft(), conn)
            else:
                self.free.append(conn)
        while self.next_due <= t and self.next_due < end:
            due = self.next_due
            self.next_due += self._gap()
            self.due_in_window += warm <= due < end
            if not self.fixed:
                conn = self.next_conn
                self.next_conn += 1
                sim.client_of[conn] = self
            elif self.free:
                conn = self.free.pop()
            else:
                self.held.append(due)
                continue
            t = self._send(t, due, conn)
        return fin(t, c.pass_us)

    def _send(self, t: float, due: float, conn: int) -> float:
        t = self.cpu.noise.finish(t, self.cost.write_us)
        self.due[conn] = (due, t)
        self.sim.arrive(t, conn, self.op, self.sim.keys.next())
        return t

    def pass_end(self, t: float) -> None:
        nxt = self.next_due if self.next_due < self.sim.end else float("inf")
        if self.replies:
            nxt = min(nxt, max(t, self.replies[0][0] + self.cost.wake_us))
        if nxt < float("inf"):
            self.cpu.want(self, max(t, nxt))

