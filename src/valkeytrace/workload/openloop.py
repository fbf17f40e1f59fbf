"""The open-loop client (record --rate): csrc/vt_load.c run in a process of its own, as the benchmark
clients are (placed on the clients' CPUs, its CPU counted as theirs).

    python -m valkeytrace.workload.openloop --host H --port P --op GET --rate R --duration S ...

prints "B" when its measured window begins, "E" when the last request due in it is due, then one
JSON line: the rates, the counts and both distributions (latency from each request's due moment,
service time from its send), as LatencyHistogram dicts, and its own CPU time over the window.
OpenLoopClient (below) starts it and calls the window hooks on those lines.
"""
from __future__ import annotations

import argparse
import os
import queue
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import msgspec

from valkeytrace import system
from valkeytrace.errors import VTError
from valkeytrace.workloads import SATURATED_SHARE
from valkeytrace.workload import placement

WARMUP_S = 0.3          # requests due before the window: sent, not counted
GRACE_S = 10.0          # after the window, how long its requests may still be answered
# a backlog the window leaves that clears this soon after it is no saturation (a pause of up to ~2 s near
# the window's end); one that does not is: the achieved rate counts the requests answered by then
DRAIN_S = 2.0
LATE_NS = 1_000_000     # sent this long after it was due: late (the client could not keep up)
# the pool grows to this while every connection waits, then pipelines (a stalled server's listen backlog,
# 511 by default, drops the SYNs beyond it and connect() waits a second for its retransmit: a client
# that kept opening connections through a 1 s pause sent late and read p99 1.2 s for 0.95 s)
MAX_CONNS = 256
READS_LOGGED = 16384  # replica reads logged per run (a uniform sample past that: every log_stride-th)


class OpenLoopError(VTError):
    pass


def initial_conns(rate: float) -> int:
    """Enough connections for a millisecond of requests to go out on idle ones, at least 8."""
    return max(8, min(256, int(rate / 1000) + 8))


@dataclass(frozen=True)
class Spec:
    """One open-loop run: `op` due at `rate` a second over `duration_s` (after a warm-up), keys drawn
    from `keyspace`, SET values of `value_size` bytes.

    connections=N: a fixed pool of N, one request in flight on each (a request due while all N wait
    is held in the client until one is answered, and is late: wrk2's model, a population of N clients);
    None: the pool grows while every connection waits, to MAX_CONNS, then pipelines (no request waits
    for another's reply)."""
    host: str
    port: int
    op: str
    rate: float
    duration_s: float
    keyspace: int
    value_size: int
    arrival: str = "poisson"
    seed: int = 1
    connections: int | None = None
    acked_path: str | None = None  # SET, --verify-durability: each key's latest acknowledged sequence, written here
    stall_log: str | None = None   # the shim's stall log (tracers/stalls.py): latencies split by stall
    replica_port: int | None = None  # --replica-get-clients: readers on this replica (csrc/vt_reader.c)
    readers: int = 0
    seen_path: str | None = None   # and each key's largest sequence they read, written here
    # a SET's sequence: CLOCK_MONOTONIC's ns plus this (durability_check.AckedWrites.epoch: the launch's, so that
    # every run's sequences rise on one clock); None: this process's wall clock minus its CLOCK_MONOTONIC
    seq_epoch: int | None = None
    cut_at: float = 0.0            # --verify-durability power-cut: acks read after this share of the window not kept
    keys_path: str | None = None   # record --cluster: the key numbers to draw from (uint32; a shard's), else all
    survive: bool = False          # record --failover: a connection its server closes is dropped, the run goes on

    def argv(self) -> list[str]:
        """This run as the module's command line (main() below)."""
        return ["--host", self.host, "--port", str(self.port), "--op", self.op, "--rate", repr(self.rate),
                "--duration", repr(self.duration_s), "--keyspace", str(self.keyspace), "--value-size",
                str(self.value_size), "--arrival", self.arrival, "--seed", str(self.seed)] + (
                    ["--connections", str(self.connections)] if self.connections else []) + (
                    ["--acked-file", self.acked_path] if self.acked_path else []) + (
                    ["--stall-log", self.stall_log] if self.stall_log else []) + (
                    ["--replica-port", str(self.replica_port), "--readers", str(self.readers)]
                    if self.readers else []) + (["--seen-file", self.seen_path] if self.seen_path else []) + (
                    ["--seq-epoch", str(self.seq_epoch)] if self.seq_epoch is not None else []) + (
                    ["--cut-at", repr(self.cut_at)] if self.cut_at else []) + (
                    ["--keys-file", self.keys_path] if self.keys_path else []) + (["--survive"] if self.survive else [])


def _config(ffi, lib, spec: Spec, marker_fd: int, keep: list):
    """The C loop's config for spec (what it points to kept alive in keep)."""
    cfg = ffi.new("struct vt_load_config *")
    keep.append(ffi.new("char[]", spec.host.encode()))
    cfg.host, cfg.port = keep[-1], spec.port
    cfg.op = lib.VT_LOAD_SET if spec.op == "SET" else lib.VT_LOAD_GET
    cfg.keyspace, cfg.value_size, cfg.rate = spec.keyspace, spec.value_size, spec.rate
    cfg.arrival = lib.VT_LOAD_UNIFORM if spec.arrival == "uniform" else lib.VT_LOAD_POISSON
    if spec.connections:
        cfg.conns = cfg.max_conns = spec.connections
        cfg.hold = 1
    else:
        cfg.conns, cfg.max_conns, cfg.hold = initial_conns(spec.rate), MAX_CONNS, 0
    cfg.warmup_ns, cfg.duration_ns = int(WARMUP_S * 1e9), int(spec.duration_s * 1e9)
    cfg.grace_ns, cfg.drain_ns, cfg.late_ns = int(GRACE_S * 1e9), int(DRAIN_S * 1e9), LATE_NS
    cfg.seed, cfg.marker_fd = spec.seed, marker_fd
    cfg.seq_epoch = spec.seq_epoch if spec.seq_epoch is not None else time.time_ns() - time.monotonic_ns()
    cfg.cut_after_ns = int(spec.cut_at * spec.duration_s * 1e9)
    if spec.rate == 0:  # closed loop: one request in flight on each connection, the next sent as it is answered
        cfg.conns = cfg.max_conns = spec.connections or 50
        cfg.hold = 1
    if spec.keys_path:
        import numpy as np

        keys = np.fromfile(spec.keys_path, dtype=np.uint32)
        if not len(keys):  # vt_load would draw from the whole keyspace instead
            raise OpenLoopError(f"{spec.keys_path}: no keys to draw from")
        keep.append(ffi.new("uint32_t[]", keys.tolist()))
        cfg.keys, cfg.nkeys = keep[-1], len(keys)
    cfg.survive = int(spec.survive)
    if spec.readers and spec.replica_port:
        keep.append(ffi.new("char[]", spec.host.encode()))
        cfg.replica_host, cfg.replica_port, cfg.readers = keep[-1], spec.replica_port, spec.readers
        keep.append(ffi.new("uint64_t[]", 3 * READS_LOGGED))
        cfg.reads, cfg.reads_cap = keep[-1], READS_LOGGED
    return cfg


class ReplicaResult(msgspec.Struct):
    """The replica readers' part of a run (csrc/vt_reader.c)."""
    reads: int
    misses: int
    with_sequence: int
    log_stride: int
    latency: dict          # histogram.LatencyHistogram.to_dict()
    log: dict              # write_ns, send_ns, recv_ns: every log_stride-th read with a sequence


class LoadResult(msgspec.Struct):
    """One open-loop run as the client process prints it (one JSON line) and the recording keeps it."""
    op: str
    rate: float
    arrival: str
    window_s: float
    due: int
    sent: int
    answered: int
    answered_in_window: int
    answered_drained: int
    late: int
    errors: int
    unanswered: int
    rejected: int
    acked: int
    conns: int
    pipelined: int
    held: int
    held_max: int
    answered_span_s: float
    cpu_s: float
    pool: str               # fixed or grow
    corrected: dict         # latency from each request's due moment (histogram dict)
    service: dict           # from its send
    in_stall: dict | None = None   # the corrected latency of the requests due during an injected stall
    outside: dict | None = None    # and of those due outside every one
    replica: ReplicaResult | None = None
    cut: tuple[int, int] | None = None  # Spec.cut_at: the cut's moment (CLOCK_MONOTONIC ns, in the sequences' clock)


def _hist(raw) -> dict:
    from valkeytrace.histogram import LatencyHistogram

    h = LatencyHistogram()
    h._h[0] = raw
    return h.to_dict()


def run(spec: Spec, marker_fd: int = -1) -> LoadResult:
    """One open-loop run in this process (the C loop); the result as the recording keeps it."""
    from valkeytrace._native import ffi, lib

    keep: list = []
    cfg = _config(ffi, lib, spec, marker_fd, keep)
    acked = ffi.new("uint64_t[]", max(1, spec.keyspace)) if spec.acked_path and spec.op == "SET" else None
    if acked is not None:
        cfg.acked = acked
    stall_map = None
    if spec.stall_log:
        from valkeytrace.tracers.stalls import map_readonly

        stall_map = map_readonly(spec.stall_log)
        if stall_map is not None:
            cfg.stalls = ffi.from_buffer(stall_map)
    seen = ffi.new("uint64_t[]", max(1, spec.keyspace)) if spec.seen_path and spec.readers else None
    if seen is not None:
        cfg.seen = seen
    res = ffi.new("struct vt_load_result *")
    pool = max(cfg.max_conns, MAX_CONNS)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < pool + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, pool + 256), hard))
    cpu0 = time.process_time()
    lib.vt_load_run(cfg, res)
    cpu_s = time.process_time() - cpu0
    began = time.monotonic_ns() >= res.window_start_ns  # CLOCK_MONOTONIC, as the C loop's: its window began
    cut = ((res.window_start_ns + cfg.cut_after_ns, res.window_start_ns + cfg.cut_after_ns + int(cfg.seq_epoch))
           if cfg.cut_after_ns and began else None)
    _keep(ffi, spec, acked, int(res.acked), seen, int(res.replica.reads), cut)  # a failed run's too: what was acknowledged
    if res.error:
        raise OpenLoopError(f"the open-loop client: {ffi.string(res.message).decode()}")
    split = {name: _hist(getattr(res, name)) for name in ("in_stall", "outside")} if stall_map is not None else {}
    counts = {k: int(getattr(res, k)) for k in ("due", "sent", "answered", "answered_in_window", "answered_drained",
                                                 "late", "errors", "unanswered", "rejected", "acked", "conns",
                                                 "pipelined", "held", "held_max")}
    out = msgspec.convert({"op": spec.op, "rate": spec.rate, "arrival": spec.arrival,
                           "window_s": (res.window_end_ns - res.window_start_ns) / 1e9, **counts,
                           "answered_span_s": (res.last_answer_ns - res.first_answer_ns) / 1e9 if res.answered_drained else 0.0,
                           "cpu_s": cpu_s, "pool": "fixed" if spec.connections else "grow",
                           "corrected": _hist(res.corrected), "service": _hist(res.service), **split}, LoadResult)
    if spec.readers:
        out.replica = _replica(ffi, cfg, res.replica, int(cfg.seq_epoch))
    out.cut = cut
    return out


def _keep(ffi, spec: Spec, acked, count: int, seen, reads: int, cut: tuple[int, int] | None) -> None:
    """The run's acknowledged floors and its readers' sequences, each in its file with the run's cut
    (durability_check.write_kept)."""
    import numpy as np

    from valkeytrace.workload.durability_check import write_kept

    for per_key, path, n in ((acked, spec.acked_path, count), (seen, spec.seen_path, reads)):
        if per_key is not None and path:
            write_kept(path, n, np.frombuffer(ffi.buffer(per_key), dtype=np.uint64), cut)


def _replica(ffi, cfg, st, clock_offset: int) -> ReplicaResult:
    """The replica readers' counts, latency and their reads' log (every log_stride-th read with a sequence):
    the value's SET sent, the GET sent, its reply read, all CLOCK_MONOTONIC ns (a sequence less the epoch)."""
    import numpy as np

    log = np.frombuffer(ffi.buffer(cfg.reads, 3 * 8 * int(st.logged)), dtype=np.uint64).reshape(-1, 3).astype(np.int64)
    return ReplicaResult(reads=int(st.reads), misses=int(st.misses), with_sequence=int(st.with_seq),
                         log_stride=int(st.log_stride or 1), latency=_hist(st.latency),
                         log={"write_ns": (log[:, 0] - clock_offset).tolist(), "send_ns": log[:, 1].tolist(),
                              "recv_ns": log[:, 2].tolist()})


def op_record(r: LoadResult) -> dict:
    """The run's `ops.OP` for an open-loop op: the corrected percentiles in the closed loop's fields,
    the service time beside, the offered and achieved rates, and both distributions."""
    from valkeytrace.histogram import LatencyHistogram

    corrected = LatencyHistogram.from_dict(r.corrected)
    service = LatencyHistogram.from_dict(r.service)
    w = r.window_s or 1.0
    offered = r.due / w
    # answered over the window, or over the span they were answered in when that is longer: a client
    # whose requests wait for it (a fixed pool, saturated) answers the window's into the drain, at the
    # server's pace, not the window's
    achieved = r.answered_drained / max(w, r.answered_span_s)
    pct = (lambda h, q: round(h.percentile(q) / 1e3, 1) if h.count else None)  # noqa: E731
    closed = not r.rate
    return {"role": "measured", "mode": "closed" if closed else "open", "clients": r.conns, "tps": round(achieved, 2),
            "requests": r.answered, "seconds": round(w, 3),
            "mean_us": round(corrected.mean_ns / 1e3, 1) if corrected.count else None,
            "p50_us": pct(corrected, 50), "p95_us": pct(corrected, 95), "p99_us": pct(corrected, 99),
            "max_us": round(corrected.max_ns / 1e3, 1) if corrected.count else None,
            "offered_rate": None if closed else round(offered, 2), "achieved_rate": None if closed else round(achieved, 2),
            "saturated": None if closed else achieved < SATURATED_SHARE * offered,
            "service_p50_us": pct(service, 50), "service_p99_us": pct(service, 99),
            "late": r.late, "unanswered": r.unanswered, "pipelined": r.pipelined,
            "pool": r.pool, "held": r.held, "held_max": r.held_max,
            "errors": r.errors, "rejected": r.rejected, "client_cpu_s": round(r.cpu_s, 4),
            **({"acked": r.acked} if r.acked else {}),
            # its own cost: CPU over the whole run (warm-up, window, drain) per request it sent
            "client_us_per_request": round(r.cpu_s * 1e6 / r.sent, 2) if r.sent else None,
            "corrected_hist": r.corrected, "service_hist": r.service, **_by_stall(r),
            "note": (f"closed loop (valkeytrace's client): {r.conns} connections, one request in flight each, "
                     "the next sent as it is answered; latency from its send" if closed else
                     f"open loop: {r.rate:g} requests/s due ({r.arrival}) over "
                     + (f"{r.conns} connections, one request in flight each"
                        if r.pool == "fixed" else "a pool that grows, then pipelines")
                     + ", latency from each one's due moment (corrected); service time from its send")}


def replica_op_record(result: LoadResult, r: ReplicaResult, readers: int) -> dict:
    """`ops.REPLICA_GET`: the replica readers' GETs (each of the key the writers sent last), closed loop."""
    from valkeytrace.histogram import LatencyHistogram

    h = LatencyHistogram.from_dict(r.latency)
    w = result.window_s or 1.0
    pct = (lambda q: round(h.percentile(q) / 1e3, 1) if h.count else None)  # noqa: E731
    return {"role": "replica-reader", "mode": "closed", "clients": readers, "tps": round(r.reads / w, 2),
            "requests": r.reads, "seconds": round(w, 3), "mean_us": round(h.mean_ns / 1e3, 1) if h.count else None,
            "p50_us": pct(50), "p95_us": pct(95), "p99_us": pct(99), "max_us": round(h.max_ns / 1e3, 1) if h.count else None,
            "service_hist": r.latency,
            "note": f"{readers} readers on the replica, one GET in flight each and at most one a millisecond "
                    "(csrc/vt_reader.h), each of the key the writers sent last"}


def replica_reads(r: ReplicaResult, readers: int) -> dict:
    """runs[].replica_reads: the counts and the reads' log (recording/model.ReplicaReads)."""
    return {"readers": readers, **msgspec.structs.asdict(r)}


def _by_stall(r: LoadResult) -> dict:
    """The corrected latency of the requests due during an injected stall and of those due outside every
    one (the shim's stall log), when the run had one."""
    from valkeytrace.histogram import LatencyHistogram

    if r.in_stall is None or r.outside is None:
        return {}
    out: dict = {}
    for part, key in ((r.in_stall, "stall"), (r.outside, "outside")):
        h = LatencyHistogram.from_dict(part)
        out[f"{key}_requests"] = h.count
        out[f"{key}_p50_us"] = round(h.percentile(50) / 1e3, 1) if h.count else None
        out[f"{key}_p99_us"] = round(h.percentile(99) / 1e3, 1) if h.count else None
    return out


class OpenLoopClient:
    """The open-loop client process: started, placed on cpus, its window markers turned into calls."""

    def __init__(self, spec: Spec, cpus=None, acked=None):
        self.spec, self.acked = spec, acked  # acked: durability_check.AckedWrites, merged into at the end
        argv = [sys.executable, "-m", "valkeytrace.workload.openloop"] + spec.argv()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     **system.own_process_group())
        if cpus:
            placement.pin(self.proc.pid, cpus)
        self.timeout = spec.duration_s + WARMUP_S + GRACE_S + 30

    def run(self, on_start=None, on_end=None) -> LoadResult:
        """Wait for its window (calling on_start, on_end on its markers) and its result."""
        err: list = []
        assert self.proc.stdout is not None and self.proc.stderr is not None  # both piped
        stderr = self.proc.stderr
        t = threading.Thread(target=lambda: err.append(stderr.read()), daemon=True)
        t.start()
        result: LoadResult | None = None
        deadline = time.monotonic() + self.timeout
        lines: queue.Queue = queue.Queue()
        stdout = self.proc.stdout

        def pump() -> None:
            for x in stdout:
                lines.put(x)
            lines.put(None)
        threading.Thread(target=pump, daemon=True).start()
        try:
            while True:  # the deadline holds when the client prints nothing (a hung child)
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise OpenLoopError("the open-loop client did not finish in time") from None
                if line is None:
                    break
                line = line.strip()
                if line == "B" and on_start:
                    on_start()
                elif line == "E" and on_end:
                    on_end()
                elif line.startswith("{"):
                    result = msgspec.json.decode(line, type=LoadResult)
            self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.acked is not None:  # whatever the run's end (a failed one's too)
                for path in filter(None, (self.spec.acked_path, self.spec.seen_path)):
                    self.acked.merge(path)
        t.join(2)
        if result is None:
            last = (err[0].strip().splitlines() or ["no output"])[-1] if err and err[0] else "no output"
            raise OpenLoopError(f"the open-loop client failed: {last}")
        return result  # the run's cut: merged from its file (AckedWrites.merge), a failed run's too


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="valkeytrace.workload.openloop")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--op", choices=("GET", "SET"), default="GET")
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--keyspace", type=int, default=100000)
    ap.add_argument("--value-size", type=int, default=64)
    ap.add_argument("--arrival", choices=("poisson", "uniform"), default="poisson")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=None)
    ap.add_argument("--acked-file", default=None)
    ap.add_argument("--stall-log", default=None)
    ap.add_argument("--replica-port", type=int, default=None)
    ap.add_argument("--readers", type=int, default=0)
    ap.add_argument("--seen-file", default=None)
    ap.add_argument("--seq-epoch", type=int, default=None)
    ap.add_argument("--cut-at", type=float, default=0.0)
    ap.add_argument("--keys-file", default=None)
    ap.add_argument("--survive", action="store_true")
    a = ap.parse_args(argv)
    sys.stdout.flush()
    try:
        out = run(Spec(a.host, a.port, a.op, a.rate, a.duration, a.keyspace, a.value_size, a.arrival, a.seed,
                       a.connections, a.acked_file, a.stall_log, a.replica_port, a.readers, a.seen_file, a.seq_epoch,
                       a.cut_at, a.keys_file, a.survive),
                   marker_fd=sys.stdout.fileno())
    except OpenLoopError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    os.write(sys.stdout.fileno(), msgspec.json.encode(out) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
