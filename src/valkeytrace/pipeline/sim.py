"""A discrete-event simulation of the durability pipeline: the benchmark clients, the server's main
thread (and its I/O thread), and whoever makes writes durable (the main thread under appendfsync
always, an offload thread under #3381 or the virtual offload), as the kernel showed them.

- A client process is one single-threaded event loop (redis-benchmark, valkey-benchmark): a pass
  reads every reply that has arrived (recording its latency from the request's write) and writes the
  next request of every connection read in the pass before (a reply's read registers the write
  event, which the next pass serves). Processes share one CPU, a pass at a time.
- The main thread loops as valkey's aeMain: beforeSleep (write the AOF, fdatasync under always, or
  queue the bytes for the offload and return; then the replies), epoll_wait (asleep when nothing
  has arrived; every request that has arrived is served by the same pass), then each request read
  and executed. With I/O threads a request is read by the I/O thread after the poll and executed in
  the next beforeSleep, before the flush; its reply is written by the I/O thread.
- An offload job takes everything queued, writes and fdatasyncs it; with a gather window W it starts
  W after the later of its first write and the previous job's end. Under `durable` a reply to a
  write, and to a read of a key whose write is not yet durable, is held until its bytes are, then
  written by the offload thread.
Outputs are taken only for requests read after the warm-up.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from valkeytrace.pipeline.params import OpResult, Params, SimResult

_DRAWS = 4096


class _Draws:
    """Pre-drawn samples of one Sampler, refilled as used."""

    def __init__(self, sampler, rng):
        self.sampler, self.rng, self.buf, self.i = sampler, rng, np.empty(0), 0

    def next(self) -> float:
        if self.i >= len(self.buf):
            self.buf, self.i = self.sampler.draws(self.rng, _DRAWS), 0
        v = self.buf[self.i]
        self.i += 1
        return float(v)


class _Noise:
    """One CPU's stalls: a Poisson process of intervals the pipeline's thread on it does not run."""

    def __init__(self, interference, rng):
        self.rate = interference.rate_per_s / 1e6
        self.draws = _Draws(interference.stall, rng) if self.rate else None
        self.rng = rng
        self.start, self.end = self._next(0.0)

    def _next(self, after: float) -> tuple:
        if not self.rate:
            return float("inf"), float("inf")
        s = after + float(self.rng.exponential(1.0 / self.rate))
        return s, s + self.draws.next()

    def finish(self, t: float, work: float) -> float:
        """When `work` µs of CPU started at t end."""
        if self.start == float("inf"):
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


class _Engine:
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


class _CPU:
    """One CPU the client processes share: a pass at a time, first come first served."""

    def __init__(self, eng: _Engine, noise: _Noise):
        self.eng, self.running, self.queue, self.noise = eng, False, deque(), noise

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
    """One benchmark process: its connections, in a closed loop or sent on a schedule."""

    def __init__(self, sim: "_Sim", group, first_conn: int, cpu: _CPU):
        self.sim, self.group, self.cpu = sim, group, cpu
        self.op = group.op
        self.conns = list(range(first_conn, first_conn + group.clients))
        self.writes: deque = deque((0.0, c) for c in self.conns)  # connections due to write
        self.replies: list = []  # heap (arrival, seq, conn)
        self.sent = {}
        self.state, self.want_at, self.token = _IDLE, 0.0, 0
        self.latencies: list = []
        self.seq = 0
        self.cost = sim.p.client

    def reply(self, conn: int, t: float) -> None:
        j = self.sim.p.jitter
        if j is not None and j.share and self.sim.rng.random() < j.share:
            t += float(self.sim.rng.exponential(j.mean_us))
        self.seq += 1
        heapq.heappush(self.replies, (t, self.seq, conn))
        self.cpu.want(self, t + self.cost.wake_us)

    def run_pass(self, t: float) -> float:
        c, sim, keyspace, op = self.cost, self.sim, self.sim.p.keyspace, self.op
        rng = sim.rng
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
                sim.arrive(t, conn, op, int(rng.integers(keyspace)))
            else:
                t = fin(t, c.read_us)
                if t >= warm:
                    lat.append(t - sent[conn])
                self.writes.append((t, conn))
        return fin(t, c.pass_us)

    def pass_end(self, t: float) -> None:
        if self.writes or (self.replies and self.replies[0][0] <= t):
            self.cpu.want(self, t)
        elif self.replies:
            self.cpu.want(self, self.replies[0][0] + self.cost.wake_us)


class _Offload:
    """The thread that writes and fdatasyncs the queued AOF bytes in jobs, and delivers held replies."""

    def __init__(self, sim: "_Sim"):
        self.sim, self.eng = sim, sim.eng
        d = sim.p.durability
        self.gather = d.gather_us
        self.chunks: deque = deque()  # (time queued, position after it)
        self.queued = self.durable = 0.0
        self.first_queued = self.last_end = self.last_start = -1e18
        self.interval = d.job_interval_us
        self.busy = False
        self.held: list = []  # (need, seq, conn, client)
        self.seq = 0
        self.jobs = 0

    def queue(self, t: float, nbytes: float) -> None:
        if not self.chunks:
            self.first_queued = t
        self.queued += nbytes
        self.chunks.append((t, self.queued))
        if not self.busy:
            self.busy = True
            self.eng.at(self._when(t), self._start, None)

    def _when(self, t: float) -> float:
        return max(t, max(self.first_queued, self.last_end) + self.gather, self.last_start + self.interval)

    def hold(self, need: float, conn: int, client: _Client) -> None:
        self.seq += 1
        heapq.heappush(self.held, (need, self.seq, conn, client))

    def _start(self, t: float, _arg) -> None:
        end_pos = None
        while self.chunks and self.chunks[0][0] <= t:
            end_pos = self.chunks.popleft()[1]
        if end_pos is None:  # what made it due was queued later than this: start then
            self.eng.at(self.chunks[0][0], self._start, None)
            return
        sim = self.sim
        self.last_start = t
        dur = sim.aof_write.next() + sim.sync.next()
        sim.syncs += t >= sim.warm
        cpu = sim.p.server.sync_cpu_us  # the write's and fdatasync's own CPU, on the server's CPU: shared
        dur += cpu                      # with the main thread, each at half speed while both run
        sim.server_burst(t, cpu)
        self.eng.at(t + dur, self._end, end_pos)

    def _end(self, t: float, end_pos: float) -> None:
        self.durable = end_pos
        self.last_end = t
        self.jobs += 1
        deliver, t0 = self.sim.p.server.deliver_us, t
        while self.held and self.held[0][0] <= end_pos:
            _, _, conn, client = heapq.heappop(self.held)
            t += deliver
            client.reply(conn, t)
        self.sim.server_burst(t0, t - t0)
        if self.chunks:
            self.first_queued = self.chunks[0][0]
            self.eng.at(self._when(t), self._start, None)
        else:
            self.busy = False


class _Sim:
    def __init__(self, p: Params, seed: int):
        self.p = p
        self.rng = np.random.default_rng(seed)
        self.eng = _Engine()
        self.warm = p.warmup_s * 1e6
        self.end = (p.warmup_s + p.duration_s) * 1e6
        self.sync = _Draws(p.durability.sync, self.rng)
        self.aof_write = _Draws(p.durability.aof_write, self.rng)
        self.mode = p.durability.mode
        self.offload = _Offload(self) if self.mode != "main" else None
        self.noise = _Noise(p.interference, self.rng)  # the server's CPU
        cpu = _CPU(self.eng, _Noise(p.client_interference, self.rng))
        self.clients, first = [], 0
        for g in p.groups:
            own = cpu if p.shared_client_cpu else _CPU(self.eng, _Noise(p.client_interference, self.rng))
            self.clients.append(_Client(self, g, first, own))
            first += g.clients
        self.client_of = {c: cl for cl in self.clients for c in cl.conns}
        self.arrivals: deque = deque()   # (time, conn, op, key), in time order
        self.asleep, self.wake_at, self.token = True, float("inf"), 0
        self.debt = self.cpu_busy_until = 0.0  # the server's CPU taken by its other threads
        self.replies: list = []          # (conn, op, key) executed, to answer in the next beforeSleep
        self.sets_pending = 0            # SETs executed since the last AOF flush
        self.key_need: dict = {}         # key -> AOF position its last write needs (None: not yet answered)
        self.io_free = 0.0
        self.io_reads: deque = deque()   # (done time, conn, op, key): read by the I/O thread
        self.iterations = self.syncs = 0
        self.writes_flushed = 0

    # -- arrivals and the main thread --------------------------------------------------------------
    def arrive(self, t: float, conn: int, op: str, key: int) -> None:
        arr = self.arrivals
        if arr and arr[-1][0] > t:  # two processes' passes may interleave: keep time order
            i = len(arr)
            while i and arr[i - 1][0] > t:
                i -= 1
            arr.insert(i, (t, conn, op, key))
        else:
            arr.append((t, conn, op, key))
        self._wake(t + self.p.server.wake_us)

    def server_burst(self, t: float, cpu_us: float) -> None:
        """Another thread of the server (the offload thread) runs cpu_us on the server's CPU from t: a
        main thread that runs meanwhile loses that time (the woken thread preempts it), a sleeping one
        wakes after it."""
        if cpu_us <= 0:
            return
        if self.asleep:
            self.cpu_busy_until = max(self.cpu_busy_until, t) + cpu_us
        else:
            self.debt += cpu_us

    def _wake(self, at: float) -> None:
        """A main thread asleep in epoll_wait runs at `at` (or earlier, if asked before)."""
        at = self.noise.finish(max(at, self.cpu_busy_until), 0.0)
        if self.asleep and at < self.wake_at:
            self.wake_at = at
            self.token += 1
            self.eng.at(at, self._woken, self.token)

    def _woken(self, t: float, token: int) -> None:
        if self.asleep and token == self.token:
            self.asleep, self.wake_at = False, float("inf")
            self._poll(t, None)

    def _poll(self, t: float, _arg) -> None:
        """epoll_wait returns: every request arrived by now is served in this pass."""
        arr, s = self.arrivals, self.p.server
        if self.debt:
            t, self.debt = t + self.debt, 0.0
        if not arr or arr[0][0] > t:
            if self.io_reads:  # the I/O thread still reads: back to beforeSleep when it is done
                self.eng.at(max(t, self.io_reads[0][0]), self._before, None)
                return
            self.asleep = True
            if arr:
                self._wake(arr[0][0] + s.wake_us)
            return
        io, fin = self.p.io_threads > 1, self.noise.finish
        while arr and arr[0][0] <= t:
            _, conn, op, key = arr.popleft()
            if io:  # handed to the I/O thread: read there, executed in the next beforeSleep
                self.io_free = max(self.io_free, t) + s.io_read_us
                self.io_reads.append((self.io_free, conn, op, key))
            else:
                t = fin(t, s.read_us[op])
                self._execute(conn, op, key)
        self.eng.at(fin(t, s.iteration_us), self._before, None)

    def _execute(self, conn: int, op: str, key: int) -> None:
        if op == "SET":
            self.sets_pending += 1
            if self.mode == "durable":
                self.key_need[key] = None
        self.replies.append((conn, op, key))

    def _before(self, t: float, _arg) -> None:
        """beforeSleep: the commands the I/O thread read, the AOF (and its fdatasync), the replies."""
        s, p = self.p.server, self.p
        if self.debt:
            t, self.debt = t + self.debt, 0.0
        self.iterations += t >= self.warm
        while self.io_reads and self.io_reads[0][0] <= t:
            _, conn, op, key = self.io_reads.popleft()
            t = self.noise.finish(t, s.exec_us.get(op, 0.0))
            self._execute(conn, op, key)
        if self.sets_pending:
            t = self.noise.finish(t, self.aof_write.next())
            if self.mode == "main":
                t += self.sync.next()
                self.syncs += t >= self.warm
            else:
                self.offload.queue(t, self.sets_pending * p.aof_bytes_per_write)
            self.writes_flushed += self.sets_pending if t >= self.warm else 0
            self.sets_pending = 0
        t = self._answer(t)
        self.eng.at(t, self._poll, None)

    def _answer(self, t: float) -> float:
        s, off, io = self.p.server, self.offload, self.p.io_threads > 1
        durable, fin = self.mode == "durable", self.noise.finish
        for conn, op, key in self.replies:
            client = self.client_of[conn]
            if durable:
                need = 0.0
                if op == "SET":
                    need = off.queued
                    self.key_need[key] = need
                else:
                    k = self.key_need.get(key, 0.0)
                    if k is None or k > off.durable:
                        need = off.queued if k is None else k
                    elif k:
                        del self.key_need[key]
                if need > off.durable:
                    t = fin(t, s.write_us * 0.5)  # the shim copies it aside instead of writing it
                    off.hold(need, conn, client)
                    continue
            if io:
                self.io_free = max(self.io_free, t) + s.io_write_us
                client.reply(conn, self.io_free)
            else:
                t = fin(t, s.write_us)
                client.reply(conn, t)
        self.replies = []
        return t

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        for cl in self.clients:
            cl.cpu.want(cl, 0.0)
        self.eng.run(self.end)
        secs = self.p.duration_s
        ops, background = {}, {}
        for cl, g in zip(self.clients, self.p.groups):
            lat = np.asarray([x for x in cl.latencies], dtype=np.float64)
            res = _op_result(g.op, lat, secs)
            target = ops if g.measured else background
            if g.op in target:  # two processes of one op: pooled
                lat = np.concatenate([target[g.op].latencies_us, lat])
                res = _op_result(g.op, lat, secs)
            target[g.op] = res
        jobs = self.syncs
        return SimResult(ops=ops, background=background, iterations_per_s=self.iterations / secs,
                         syncs_per_s=self.syncs / secs,
                         writes_per_sync=(self.writes_flushed / jobs) if jobs else None,
                         jobs_waited_per_write=None, seconds=secs, events=self.eng.events)


def _op_result(op: str, lat: np.ndarray, secs: float) -> OpResult:
    if not len(lat):
        return OpResult(op, 0, 0.0, None, None, None, None, lat)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return OpResult(op, int(len(lat)), len(lat) / secs, float(p50), float(p95), float(p99), float(lat.mean()), lat)


def simulate(p: Params, seed: int = 1) -> SimResult:
    """Run the pipeline p for p.warmup_s + p.duration_s of simulated time."""
    return _Sim(p, seed).run()
