"""The recording document: its shape, its version, and the only code that builds it.

Everything a `record` run writes goes through here: the CLI makes the header (new_document), the
recorder adds runs (new_run, op_record, background_op) and warnings, the tracers build each run's
`server` window (server_window, thread_record), and finish() closes it. The shape is declared
once, in recording/model.py: recording/schema.py validates a loaded document against it and
docs/recording-format.md's field tables are generated from it.

Version history (the document's `version` and the container's `format` line are the same number):
    1  valkeytrace 0.1: format, version, label, complete, created, valkeytrace_version, argv,
       server, host, client, settings, warnings, runs[] (workload, value_size, repeat, status,
       error, ops, server). Later, still written as 1 (no history line then; all optional, read
       as absent):
       - ended, tracer {backend, peak_rss_kb};
       - emulation {fsync_delay, fsync_sensitivity_ns, description}; settings.fsync_sensitivity_ns;
         run.fsync_extra_delay_ns;
       - overhead (record --measure-overhead), with order and untraced_side later still;
       - run.server_view (INFO latencystats, commandstats, LATENCY LATEST), run.host_cpu,
         run.demand (the GET-only pass the what-if builds on);
       - op.cumulative_distribution, op.calibration_rps, op.client_cpu_s;
       - server.probe.untimed, server.probe.call_source naming the shim's wrappers under
         injection, server.eventloop, server.shim (record --backend both), thread.sched,
         thread.injected_ns; the shim's region layout 2 (csrc/valkeytrace.h), not in the file.
    2  valkeytrace 0.2: the same keys, now declared (the types below) and built in this module
       only. A version-1 file loads as it is: every key version 2 added is optional, and
       upgrade() marks it (upgraded_from: 1) so reports can say so. Later, still 2 (optional, read
       as absent): run.demand.loaded (the GET pass with the background clients reading);
       run.host_cpu.clients_cpu_wait (the clients' share of time waiting for a CPU);
       client.placement (record --client-cpus: the CPUs the benchmark clients ran on);
       run.offload, run.launch, document.launches, server.requests; emulation.offload keeps
       {mode, gather_ns} only from 2026-12-03 (before: the figures a report now derives from
       runs[].offload; still read, unused). From 2026-12-03 the model is declared in
       recording/model.py and validated by msgspec.
"""
from __future__ import annotations

import sys
import time
from typing import Any

import msgspec

from valkeytrace.recording import model
from valkeytrace.recording.model import fields

DOCUMENT_FORMAT = "valkeytrace-recording"
VERSION = 2
OLDEST_READABLE = 1
US_PER_MS = 1000.0


def _record(t: type, **kw: Any) -> dict:
    """A record of the declared type t, as the plain dict `record` writes (keys checked against t)."""
    unknown = set(kw) - set(fields(t))
    if unknown:
        raise TypeError(f"not a {t.__name__} key: {', '.join(sorted(unknown))}")
    return kw


def plain(rec: Any) -> Any:
    """A declared record (a msgspec Struct, recording/model.py) as the plain value `record` writes: its
    fields that are set (a None is the field's default on decode, so it is left out), nested records
    alike; anything else as msgspec encodes it. None for None."""
    import msgspec

    if isinstance(rec, msgspec.Struct):
        return {f: plain(v) for f in fields(type(rec)) if (v := getattr(rec, f)) is not None}
    if isinstance(rec, (list, tuple)):
        return [plain(v) for v in rec]
    return msgspec.to_builtins(rec) if rec is not None else None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def new_document(*, label: str, server: dict, host: dict, client: dict | None, settings: dict,
                 emulation: dict | None, warnings: list[dict]) -> dict:
    from valkeytrace import __version__

    return _record(model.Document, format=DOCUMENT_FORMAT, version=VERSION, label=label, complete=False, created=_now(),
                    valkeytrace_version=__version__, argv=list(sys.argv), server=server, host=host,
                    client=client, settings=settings, emulation=emulation, warnings=list(warnings), runs=[])


def warning(code: str, **figures) -> dict:
    """A warning every report shows, as the recording keeps it: its code and figures
    (reporters/sentences.py words them)."""
    return {"code": code, "figures": figures}


def add_warning(doc: dict, code: str, **figures) -> None:
    doc.setdefault("warnings", []).append(warning(code, **figures))


def set_nodes(doc: dict, nodes: list[dict]) -> None:
    """record --replicas: the primary and its replicas (role, pid, port, version, config)."""
    doc["nodes"] = nodes


def set_overhead(doc: dict, overhead: dict) -> None:
    doc["overhead"] = overhead


def finish(doc: dict, *, interrupted: bool, tracer: dict) -> None:
    """Close the document: complete unless interrupted or a run failed."""
    doc["tracer"] = tracer
    doc["complete"] = not interrupted and all(r.status == "ok" and r.server_exit is None for r in outcomes(doc))
    doc["ended"] = _now()


class RunOutcome(msgspec.Struct, kw_only=True):
    """Of a run (its declared fields: model.Run): which it was, how it ended, its times; the rest unread."""
    workload: str = "?"
    value_size: int = 0
    status: str = "running"
    repeat: int | None = None
    error: str | None = None
    server_exit: model.ServerExit | None = None
    started_at: float | None = None
    ended_at: float | None = None
    window_start: float | None = None
    window_end: float | None = None


class _Named(msgspec.Struct):
    label: str = ""


def outcomes(doc: dict) -> list[RunOutcome]:
    """The document's runs, how each ended and when (the rest of each run is not read)."""
    return msgspec.convert(doc.get("runs") or [], list[RunOutcome], strict=False)


def outcome(run: dict) -> RunOutcome:
    """One run, how it ended and when."""
    return msgspec.convert(run, RunOutcome, strict=False)


def label_of(doc: dict) -> str:
    """The document's label (model.Document.label)."""
    return msgspec.convert(doc, _Named, strict=False).label


class _Launch(msgspec.Struct, kw_only=True):
    """Of one launch's document (model.Document): what merge_launches reads."""
    runs: list[RunOutcome] = []
    server: model.ServerInfo = msgspec.field(default_factory=model.ServerInfo)
    complete: bool = False
    timing: dict | None = None
    warnings: list = []


def new_run(doc: dict, workload: str, value_size: int, repeat: int, extra_delay_ns: int | None) -> dict:
    """A run appended to doc, status running until the recorder sets it."""
    run = _record(model.Run, workload=workload, value_size=value_size, repeat=repeat, status="running", error=None,
              started_at=time.time(), ops={})
    if extra_delay_ns is not None:
        run["fsync_extra_delay_ns"] = extra_delay_ns
    doc["runs"].append(run)
    return run


def set_op(run: dict, op: str, record: dict) -> None:
    """The run's figures of one op (runs[].ops.OP)."""
    run.setdefault("ops", {})[op] = record


def op_record(report, role: str) -> dict:
    """A measured op from the benchmark client's parsed report (workload/parse.ClientReport)."""
    lat = report.latency_ms
    return _record(model.Op, role=role, clients=report.clients, tps=report.tps, requests=report.requests,
                   seconds=report.seconds, mean_us=lat.avg * US_PER_MS, min_us=lat.min * US_PER_MS,
                   p50_us=lat.p50 * US_PER_MS, p95_us=lat.p95 * US_PER_MS, p99_us=lat.p99 * US_PER_MS,
                   max_us=lat.max * US_PER_MS, percentile_distribution=report.percentile_distribution,
                   cumulative_distribution=report.cumulative_distribution, progress=report.progress,
                   command=report.command, calibration_rps=report.calibration_rps, calibration_s=report.calibration_s,
                   attempts=report.attempts, tries=report.tries, client_cpu_s=report.client_cpu_s)


def background_op(*, clients: int, tps: float | None, mean_ms: float | None, samples: int, progress: list,
                  command: list) -> dict:
    """The background load's op: rate and mean from its progress lines inside the window."""
    return _record(model.Op, role="background", clients=clients, tps=tps,
              mean_us=mean_ms * US_PER_MS if mean_ms is not None else None,
              p50_us=None, p95_us=None, p99_us=None, progress_samples=samples, progress=progress,
              command=command,
              note="background load: rate and mean latency from the client's progress lines inside the "
                   "measured GET window (the client prints no percentiles until it ends)")


def thread_record(tid: int, name: str, role: str) -> dict:
    return _record(model.ThreadRecord, tid=tid, name=name, role=role, calls={}, off_cpu_ns={})


def server_window(*, backend: str, window_ns: int, pid: int, threads: list[dict], lost_events: int,
                  blocked_timeline: dict, probe: dict, **extra: Any) -> dict:
    """One tracer window, threads main first (extra: hist_buckets, eventloop)."""
    unknown = set(extra) - set(fields(model.ServerWindow))
    if unknown:
        raise TypeError(f"not a server window key: {', '.join(sorted(unknown))}")
    return _record(model.ServerWindow, backend=backend, window_ns=window_ns, pid=pid, main_tid=pid,
                        threads=sorted(threads, key=lambda t: (t["role"] != "main", t["tid"])),
                        lost_events=lost_events, blocked_timeline=blocked_timeline, probe=probe, **extra)


def upgrade(doc: dict) -> dict:
    """A document of an older version, in today's shape (validated afterwards by schema.py)."""
    version = doc.get("version")
    if isinstance(version, int) and OLDEST_READABLE <= version < VERSION:
        doc["upgraded_from"] = version
        doc["version"] = VERSION
    return doc


def merge_launches(launches: list[tuple[int, dict]], side: str) -> dict | None:
    """One side of `valkeytrace compare` as one recording: the first launch's description, every
    launch's runs (each tagged with its launch number), every launch's warnings once, and per
    launch what was launched (`launches[]`); complete only when every launch is. None without a
    launch."""
    import copy

    if not launches:
        return None
    out = copy.deepcopy(launches[0][1])
    runs: list = []
    out["runs"], out["launches"], warnings = runs, [], []
    complete = True
    for k, d in launches:
        seen = msgspec.convert(d, _Launch, strict=False)
        runs += [dict(r, launch=k) for r in d.get("runs") or []]
        starts = [r.started_at for r in seen.runs if r.started_at]
        out["launches"].append({"launch": k, "side": side, "pid": seen.server.pid, "version": seen.server.version,
                                "started_at": min(starts) if starts else None, "complete": seen.complete,
                                "timing": seen.timing})
        warnings += [w for w in seen.warnings if w not in warnings]
        complete = complete and seen.complete
    out["warnings"] = warnings
    out["complete"] = complete
    return out
