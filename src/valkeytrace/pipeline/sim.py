"""A discrete-event simulation of the durability pipeline: the benchmark clients, the server's main
thread (and its I/O thread), and whoever makes writes durable (the main thread under appendfsync
always, an offload thread under #3381 or the virtual offload), as the kernel showed them.

- The client processes (pipeline/actors.py: closed loop, or open loop at a rate) share one CPU, a
  pass at a time.
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

from valkeytrace.workloads import SATURATED_SHARE
from valkeytrace.pipeline.actors import CPU, ClosedClient, Draws, Engine, Noise, OpenClient, Uniform
from valkeytrace.pipeline.params import OpenFigures, OpResult, Params, SimResult


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
        self.held_peak = 0
        self.running_until = -1e18  # the running job's end (bio-write-block's hand-off waits for it)

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

    def hold(self, need: float, conn: int, client: ClosedClient | OpenClient, t: float = 0.0) -> None:
        self.seq += 1
        heapq.heappush(self.held, (need, self.seq, conn, client))
        if t >= self.sim.warm and len(self.held) > self.held_peak:
            self.held_peak = len(self.held)

    def _start(self, t: float, _arg) -> None:
        end_pos = None
        while self.chunks and self.chunks[0][0] <= t:
            end_pos = self.chunks.popleft()[1]
        if end_pos is None:  # what made it due was queued later than this: start then
            self.eng.at(self.chunks[0][0], self._start, None)
            return
        sim = self.sim
        self.last_start = t
        dur = (0.0 if sim.p.durability.design == "main-write" else sim.aof_write.next()) + sim.sync_len(t)
        sim.syncs += t >= sim.warm
        cpu = sim.p.server.sync_cpu_us  # the write's and fdatasync's own CPU, on the server's CPU: shared
        dur += cpu                      # with the main thread, each at half speed while both run
        sim.server_burst(t, cpu)
        self.running_until = t + dur
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
        per_request = np.random.default_rng([seed, 1])  # apart, so a key drawn does not move a timing's draw
        self.keys, self.coin = Uniform(per_request, p.keyspace), Uniform(per_request)
        self.eng = Engine()
        self.warm = p.warmup_s * 1e6
        self.end = (p.warmup_s + p.duration_s) * 1e6
        self.sync = Draws(p.durability.sync, self.rng)
        self.aof_write = Draws(p.durability.aof_write, self.rng)
        self.mode = p.durability.mode
        self.offload = _Offload(self) if self.mode != "main" else None
        self.noise = Noise(p.interference, self.rng)  # the server's CPU
        cpu = CPU(self.eng, Noise(p.client_interference, self.rng))
        self.clients, first = [], 0
        for g in p.groups:
            own = cpu if p.shared_client_cpu else CPU(self.eng, Noise(p.client_interference, self.rng))
            self.clients.append((OpenClient if g.rate else ClosedClient)(self, g, first, own))
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
        d = p.durability
        self.stall_next = d.stall_period_us if d.stall_us and d.stall_period_us else float("inf")

    def sync_len(self, t: float) -> float:
        """One sync's length starting at t: a drawn call, and the disk's stall when one is due."""
        d, n = self.p.durability, self.sync.next()
        if t >= self.stall_next:
            n += d.stall_us
            self.stall_next += d.stall_period_us * (1 + (t - self.stall_next) // d.stall_period_us)
        return n

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
        self.iterations += self.warm <= t < self.end
        while self.io_reads and self.io_reads[0][0] <= t:
            _, conn, op, key = self.io_reads.popleft()
            t = self.noise.finish(t, s.exec_us.get(op, 0.0))
            self._execute(conn, op, key)
        if self.sets_pending:
            t = self.noise.finish(t, self.aof_write.next())
            if self.mode == "main":
                t += self.sync_len(t)
                self.syncs += self.warm <= t < self.end
            elif self.offload is not None:
                if p.durability.design == "bio-write-block" and self.offload.running_until > t:
                    t = self.offload.running_until  # the hand-off waits while a job runs
                self.offload.queue(t, self.sets_pending * p.aof_bytes_per_write)
            self.writes_flushed += self.sets_pending if self.warm <= t < self.end else 0
            self.sets_pending = 0
        t = self._answer(t)
        self.eng.at(t, self._poll, None)

    def _answer(self, t: float) -> float:
        s, off, io = self.p.server, self.offload, self.p.io_threads > 1
        durable, fin = self.mode == "durable", self.noise.finish
        for conn, op, key in self.replies:
            client = self.client_of[conn]
            if durable and off is not None:
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
                    t = fin(t, s.write_us)  # produced as any reply (the shim keeps it instead of the socket)
                    off.hold(need, conn, client, t)
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
            if isinstance(cl, OpenClient):
                cl.start()
            else:
                cl.cpu.want(cl, 0.0)
        # an open loop's requests due in the window may be answered until the drain's end (the real
        # client's rule: workload/openloop.DRAIN_S); the closed loops and the server count to the window's
        self.eng.run(self.end + (self.p.drain_s * 1e6 if any(g.rate for g in self.p.groups) else 0.0))
        secs = self.p.duration_s
        ops: dict = {}
        background: dict = {}
        for cl, g in zip(self.clients, self.p.groups):
            lat = np.asarray(cl.latencies, dtype=np.float64)
            res = _op_result(g.op, lat, secs)
            target = ops if g.measured else background
            if g.op in target:  # two processes of one op: pooled
                lat = np.concatenate([target[g.op].latencies_us, lat])
                res = _op_result(g.op, lat, secs)
            if isinstance(cl, OpenClient):
                res.open = _open_figures(cl, len(lat), secs)
                res.tps = res.open.achieved_rate  # as the real client's: the achieved rate, not answered / window
            target[g.op] = res
        jobs = self.syncs
        return SimResult(ops=ops, background=background, iterations_per_s=self.iterations / secs,
                         syncs_per_s=self.syncs / secs,
                         writes_per_sync=(self.writes_flushed / jobs) if jobs else None,
                         jobs_waited_per_write=None, seconds=secs, events=self.eng.events,
                         held_peak=self.offload.held_peak if self.offload else 0)


def _op_result(op: str, lat: np.ndarray, secs: float) -> OpResult:
    if not len(lat):
        return OpResult(op, 0, 0.0, None, None, None, None, lat)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return OpResult(op, int(len(lat)), len(lat) / secs, float(p50), float(p95), float(p99), float(lat.mean()), lat)


def _open_figures(cl: OpenClient, answered: int, secs: float) -> OpenFigures:
    # over the window, or the span they were answered in when longer (the real client's rule)
    span = max(secs, (cl.last_answer - cl.first_answer) / 1e6 if answered else 0.0)
    offered, achieved = cl.due_in_window / secs, answered / span
    svc = np.asarray(cl.service, dtype=np.float64)
    p50, p99 = (np.percentile(svc, [50, 99]) if len(svc) else (None, None))
    return OpenFigures(offered, achieved, achieved < SATURATED_SHARE * offered,
                       None if p50 is None else float(p50), None if p99 is None else float(p99))


def simulate(p: Params, seed: int = 1) -> SimResult:
    """Run the pipeline p for p.warmup_s + p.duration_s of simulated time."""
    return _Sim(p, seed).run()
