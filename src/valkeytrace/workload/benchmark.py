"""Running the benchmark client the way valkey#4029 did, and keeping everything it prints.

A measured run is a fixed request count sized from a short calibration run, so that it lasts
about --duration seconds whatever the server's speed (the clients have no duration option);
its full report (percentile distribution included) is parsed. A background load runs with a
huge request count and is stopped when the measured run ends; its own results come from its
progress lines (rate and mean latency, ~8 per second), restricted to the measured window.
"""
from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import threading
import time
from typing import NamedTuple

from valkeytrace import environment, system
from valkeytrace.system import MeasuredClient
from valkeytrace.errors import VTError
from valkeytrace.workload import placement
from valkeytrace.workload.clients import BenchmarkClient
from valkeytrace.workload.parse import ClientReport, ClientSched, ParseError, Progress, parse_progress, parse_report

ENDLESS_REQUESTS = 2_000_000_000
CALIBRATION_S = 1.0



class WindowSummary(NamedTuple):
    """The background load inside the measured window, from its progress lines."""
    tps: float | None
    mean_latency_ms: float | None
    samples: int

class BenchmarkError(VTError):
    pass


def client_argv(client: BenchmarkClient, host: str, port: int, test: str, clients: int,
                value_size: int, keyspace: int, requests: int) -> list[str]:
    return [client.path, "-h", host, "-p", str(port), "-t", test, "-c", str(clients),
            "-d", str(value_size), "-r", str(keyspace), "-n", str(requests)]


class ClientProcess:
    """One client process, on cpus when given (workload/placement.py). A reader thread keeps all
    output and timestamps each progress line."""

    def __init__(self, argv: list[str], cpus=None):
        self.argv = argv
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, **system.own_process_group())
        except OSError as exc:
            raise BenchmarkError(f"cannot start the benchmark client {argv[0]}: {exc}") from exc
        if cpus:
            # set from here, not in the child before exec (preexec_fn can deadlock a threaded
            # parent): the client is still starting up, before its first connection
            try:
                placement.pin(self.proc.pid, cpus)
            except OSError as exc:
                self.proc.kill()
                self.proc.wait()
                raise BenchmarkError(f"cannot place the benchmark client on CPU {system.format_cpu_list(cpus)}: {exc}") from exc
        self.started_mono = time.monotonic()
        self.sched: tuple[int, int] | None = None  # (on-CPU ns, run-queue wait ns) once it has exited
        self._chunks: list[bytes] = []
        self.progress: list[tuple[float, Progress]] = []  # (monotonic seconds, progress line)
        self._partial = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        assert self.proc.stdout is not None  # piped
        fd = self.proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            now = time.monotonic()
            self._chunks.append(chunk)
            text = self._partial + chunk.decode("utf-8", "replace")
            pieces = text.replace("\n", "\r").split("\r")
            self._partial = pieces.pop()
            for rec in parse_progress("\r".join(pieces)):
                self.progress.append((now, rec))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def output(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    def wait(self, timeout: float, server_ended=None) -> int | None:
        """Its exit code, or None after timeout seconds or once server_ended (a threading.Event) is
        set. Between its exit and its reaping, its scheduler totals are read (self.sched: on-CPU and
        run-queue wait ns, all its threads)."""
        deadline = time.monotonic() + timeout
        # woken by its exit (a pidfd turns readable), not by a poll: a window's end is the client's (a
        # 50 ms poll put up to 5% of idle server time into a 1 s window)
        waiter = select.poll()
        pidfd: int | None = None
        try:
            pidfd = os.pidfd_open(self.proc.pid)
        except OSError:
            pass  # reaped already, or a kernel without pidfds: polled
        else:
            waiter.register(pidfd, select.POLLIN)
        delay = 0.0005  # without a pidfd, as subprocess polls: doubling up to 50 ms
        try:
            while True:
                try:
                    exited = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
                except ChildProcessError:
                    break  # reaped already
                if exited is not None:
                    self.sched = system.process_schedstat(self.proc.pid)
                    break
                if time.monotonic() >= deadline or (server_ended is not None and server_ended.is_set()):
                    return None
                if pidfd is not None:
                    waiter.poll(50)  # and a look at server_ended every 50 ms
                else:
                    time.sleep(delay)
                    delay = min(2 * delay, 0.05)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        rc = self.proc.wait()
        self._reader.join(timeout=2)
        return rc

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM, then SIGKILL; always reaped. (Not SIGINT: a shell running us in the
        background leaves SIGINT ignored in its children.)"""
        if self.proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
                try:
                    self.proc.send_signal(sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.proc.wait()
        self._reader.join(timeout=2)
        if self.proc.stdout:
            self.proc.stdout.close()

    def window_summary(self, t0: float, t1: float) -> WindowSummary:
        """Rate and mean latency from the progress lines inside [t0, t1] (monotonic seconds)."""
        inside = [rec for t, rec in self.progress if t0 <= t <= t1 and rec.rps == rec.rps]
        if not inside:
            return WindowSummary(None, None, 0)
        tps = sum(r.rps for r in inside) / len(inside)
        weighted = [(r.rps, r.avg_ms) for r in inside if r.avg_ms == r.avg_ms and r.rps > 0]
        total = sum(w for w, _ in weighted)
        mean = sum(w * v for w, v in weighted) / total if total else None
        return WindowSummary(tps, mean, len(inside))

    def progress_series(self, origin: float) -> list[list]:
        """[[seconds since origin, instantaneous rps, instantaneous mean ms], ...]"""
        return [[round(t - origin, 3), r.rps, r.avg_ms if r.avg_ms == r.avg_ms else None] for t, r in self.progress]


def _flag(argv: list[str], flag: str, default: str) -> str:
    """The value after flag in a client's argv (client_argv), or default."""
    return argv[argv.index(flag) + 1] if flag in argv else default


def calibrate(client: BenchmarkClient, argv: list[str], seconds: float = CALIBRATION_S) -> float:
    """Requests per second of this test (client_argv, endless) right now (also warms the server up):
    the client's steady rate once it has run `seconds` and answered something. A client whose first
    progress line comes late (still connecting its clients: seen at 1 s under `appendfsync always`)
    is waited for, up to 10 s more."""
    test = _flag(argv, "-t", "benchmark")
    proc = ClientProcess(argv, client.cpus)
    try:
        deadline = time.monotonic() + seconds + 10
        while time.monotonic() < deadline:
            if proc.proc.poll() is not None:
                break
            if proc.progress:
                t, last = proc.progress[-1]
                if last.overall_rps > 0 and t - proc.started_mono >= seconds:
                    break
            time.sleep(0.05)
    finally:
        proc.stop()
    rates = [rec.overall_rps for _, rec in proc.progress if rec.overall_rps > 0]
    if not rates:
        raise BenchmarkError(f"the benchmark client reported no progress while calibrating {test} "
                             f"(exit {proc.proc.returncode}); its output: {proc.output.strip()[-200:]!r}")
    # the steady rate: the instantaneous rates of the second half (the overall rate counts the
    # clients' connecting and warming up, and sized runs that ended at half their --duration)
    t_end = proc.progress[-1][0]
    steady = sorted(rec.rps for t, rec in proc.progress
                    if t >= t_end - (t_end - proc.started_mono) / 2 and rec.rps > 0)
    return steady[len(steady) // 2] if steady else rates[-1]


def run_requests(client: BenchmarkClient, argv: list[str], timeout_s: float, on_start=None,
                 on_end=None) -> ClientReport:
    """Run the client's argv (client_argv: a test for a fixed number of requests); its parsed report,
    with the client's CPU time (its rusage: it is the only child reaped meanwhile). on_start/on_end are
    called right when the client starts and ends (the measured window, for the tracers)."""
    test = _flag(argv, "-t", "benchmark")
    if on_start:
        on_start()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = ClientProcess(argv, client.cpus)
    try:
        started_wall = time.time()
        rc = proc.wait(timeout=timeout_s, server_ended=client.server_ended)
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        ended_mono = time.monotonic()
        if on_end:
            on_end()
        if rc is None and client.server_ended is not None and client.server_ended.is_set():
            raise BenchmarkError(f"the server ended under the {test} run; its client stopped")
        if rc is None:
            raise BenchmarkError(f"{test} run did not finish within {timeout_s:.0f}s; stopped it")
    finally:
        proc.stop()  # also on Ctrl-C: no client is ever left behind
    try:
        report = parse_report(proc.output)
    except ParseError as exc:
        raise BenchmarkError(f"{test} client exited {rc}: {exc}; last output: "
                             f"{proc.output.strip()[-200:]!r}") from exc
    report.command, report.started_at = argv, started_wall
    report.window_s = round(ended_mono - proc.started_mono, 3)
    report.client_cpu_s = round((children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime), 4)
    if proc.sched is not None:
        report.client_sched = ClientSched(round(proc.sched[0] / 1e9, 4), round(proc.sched[1] / 1e9, 4),
                                          round(ended_mono - proc.started_mono, 3))
    report.progress = proc.progress_series(proc.started_mono)
    return report


def measured_client(report: ClientReport | None) -> MeasuredClient:
    """What a window's CPU accounting needs of the measured client (system.cpu_window): its CPU
    seconds and its time waiting for a CPU over its life (when its schedstat was read)."""
    if report is None:
        return MeasuredClient()
    sched = report.client_sched
    return MeasuredClient(report.client_cpu_s or 0.0, sched.wait_s if sched else None, sched.lifetime_s if sched else None)


# a try within this share of --duration is kept (check 19 holds windows to 10%): 0.62 extra windows a
# run over 646 runs of the suite; the misses are the rate's own moves between tries (13-33% off in 12
# of 22 tries sampled, none between 7.5 and 10%: a wider bound would not have kept them). The default of
# $VALKEYTRACE_WINDOW_ACCEPT (recorder.Settings.window_accept, recorded in the settings)
WINDOW_ACCEPT = 0.075


class WindowAccept(NamedTuple):
    """How far a closed-loop window may run short of --duration and long past it, as shares of it, and be
    kept (long None: any longer window). A test that needs enough of a window but not its length keeps a
    long one: under make test's four workers a 1 s window once ran 7.6 s, then was measured again."""
    short: float = WINDOW_ACCEPT
    long: float | None = WINDOW_ACCEPT

    def keeps(self, took: float, duration_s: float) -> bool:
        off = (took - duration_s) / duration_s
        return -off <= self.short if off < 0 else (self.long is None or off <= self.long)


def window_accept() -> WindowAccept:
    """$VALKEYTRACE_WINDOW_ACCEPT, else WINDOW_ACCEPT either way."""
    return WindowAccept(*environment.window_accept(WINDOW_ACCEPT))


# a first run's guess at the client's start (its connections, before its first request): 55-74 ms
# median over 360 windows of the suite (window less the client's own seconds); later runs learn theirs
STARTUP_GUESS_S = 0.06
WINDOW_ATTEMPTS = 4


class RateMemo:
    """The rate a cell ran at, kept for its next run in one process (a repeat, a later launch of the side under
    compare): a run sized by it needs no calibration pass. Keyed by what sets the rate (the side, the cell,
    the added fsync delay); updated with each window's own rate. Sized by the last window's own rate, first
    tries missed 7.5% less often than sized by a calibration pass just before (the suite's timed phase,
    2026-12-06: 10 windows run again in 72 runs, against 27), and each such pass is a second of load. (Sized
    by the median of the last three windows' rates, check 27's intervals came out wider, 0.51 of the point
    against 0.36 in the same hour: not kept.)"""

    def __init__(self, store: dict, key: tuple):
        self.store, self.key = store, key

    def get(self) -> float | None:
        return self.store.get(self.key)

    def put(self, rate: float) -> None:
        self.store[self.key] = rate

    def startup(self, test: str, clients: int) -> float:
        """Seconds a window spends beyond its requests (the client connecting its clients, their first
        requests, its exit), as the side's last run of this test and client count took: any cell, this
        launch's too (not a rate). Per test: 50 SET clients lost less than 50 GET clients here, and a
        loss shared between them left write-only windows 4% short and read-heavy ones 3-7% long."""
        return self.store.get(("startup_s", test, clients), 0.0)

    def learned(self, test: str, clients: int) -> bool:
        """Whether a calibrated run of this test and client count was measured (startup, bias)."""
        return ("bias", test, clients) in self.store

    def bias(self, test: str, clients: int) -> float:
        """A window's own rate over its calibration's, as the side's last calibrated run of this test
        took (read-heavy's GET ran 4-9% under its calibration here: a window starts cold)."""
        return self.store.get(("bias", test, clients), 1.0)

    def put_window(self, test: str, clients: int, startup_s: float, bias: float | None) -> None:
        self.store[("startup_s", test, clients)] = startup_s
        if bias is not None:
            self.store[("bias", test, clients)] = bias


def run_measured(client: BenchmarkClient, argv_of, duration_s: float, on_start=None, on_end=None,
                 memo: RateMemo | None = None, accept: WindowAccept = WindowAccept()) -> ClientReport:
    """Calibrate (or take the rate the memo kept), then run the test argv_of(requests) gives for about
    duration_s; return its parsed report.

    on_start/on_end are called right when the measured client starts and ends (the measured
    window, for the tracers)."""
    known = memo.get() if memo is not None else None
    t0 = time.monotonic()
    calibrated = None if known else calibrate(client, argv_of(ENDLESS_REQUESTS))
    calibration_s = 0.0 if known else time.monotonic() - t0
    clients, test = int(_flag(argv_of(1), "-c", "1")), _flag(argv_of(1), "-t", "")
    # the window is the client's process: its requests at its own rate, and its start, connecting and
    # first requests (~0.1 s for 50 clients here), both as the side's last calibrated run of the test
    # took (sized by the steady rate alone, 1.5 s windows took 1.59-1.65 s and a third of the runs a
    # second try); a first run is sized by its calibration and a guessed start (STARTUP_GUESS_S)
    startup, bias = ((memo.startup(test, clients), memo.bias(test, clients))
                     if memo is not None and memo.learned(test, clients) else (STARTUP_GUESS_S, 1.0))
    rate = known or (calibrated or 0.0) * bias
    tries: list[tuple[int, float]] = []
    for attempt in range(1, WINDOW_ATTEMPTS + 1):
        sized_by = rate
        requests = max(int(rate * max(duration_s - startup, duration_s / 2)), clients * 20)
        report = run_requests(client, argv_of(requests),
                              timeout_s=duration_s * 4 + 30, on_start=on_start, on_end=on_end)
        took, own = report.window_s, report.seconds
        tries.append((requests, took or 0.0))
        # the run is the window: one further from --duration than `accept` keeps (the rate
        # moves +-10-15% between tries under appendfsync always, as GETs take one or two fsync
        # cycles; a window of 2.27 s for 2 s was kept once when a second try was allowed the
        # whole tolerance) is measured again, sized by its own rate (the median of the rates seen
        # was tried: a CI window then ran 4.66 s for 2 after the rate fell between tries); the window
        # hooks run again. The last try is kept whatever its length (the recording has it).
        if took and own and 0 < own <= took:  # the client's own seconds: the window less its start
            startup, rate = min(took - own, duration_s / 2), requests / own
            if memo is not None:
                memo.put_window(test, clients, startup,
                                min(max(rate / calibrated, 0.7), 1.3) if calibrated and attempt == 1 else None)
        elif took:
            rate = requests / took
        if took and memo is not None:
            memo.put(rate)
        if not took or accept.keeps(took, duration_s):
            break
    report.calibration_rps, report.attempts, report.tries = sized_by, attempt, tries
    report.calibration_s = calibration_s  # 0: sized by the rate an earlier run of the cell kept
    return report
