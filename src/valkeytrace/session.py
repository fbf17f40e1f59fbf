"""Run one RecordPlan (valkeytrace.plan): launch or attach the server, place the clients, start the
tracer and the emulation, let the Recorder run the matrix, and finish the recording.

SIGTERM behaves like Ctrl-C: stop cleanly, keep what was measured. SIGINT gets the same handler
explicitly: a process started in the background by a non-interactive shell inherits SIGINT
ignored, and Python then leaves it ignored, so Ctrl-C (or a test's SIGINT) was lost and the
recording ran to its end with exit 0 (seen in a fresh clone's `make test`).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable

from valkeytrace import estimate, stopping, system
from valkeytrace.analysis.note import Note
from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.plan import RecordPlan, parse_failover
from valkeytrace.recorder import Recorder, SideMemo
from valkeytrace.recording import document
from valkeytrace.recording.model import DurabilityCheck, ServerInfo, decode_as
from valkeytrace.reporters.sentences import warning_text
from valkeytrace.server.process import Target


# what a side keeps across its launches in this process (compare runs them here): Recorder.memo, by plan
_MEMOS: dict[str, SideMemo] = {}


def memo(plan: RecordPlan) -> SideMemo:
    """The store of this plan's launches in this process (the same plan but for its output)."""
    return _MEMOS.setdefault(dataclasses.replace(plan, output=None, notes=()).as_json(), SideMemo())


@dataclass
class Outcome:
    doc: dict
    output: str
    interrupted: bool


def default_label(server: ServerInfo, other_binary: bool = False) -> str:
    """'fsync-always'; with --server-binary, what differs first: 'valkey-8.1.8-fsync-always'."""
    if not server.appendonly:
        setting = "aof-off"
    elif server.bio_aof_offload:
        setting = "bio-offload"
    else:
        setting = f"fsync-{server.appendfsync or 'unknown'}"
    if other_binary:
        return f"{server.server_name or 'server'}-{server.version or 'unknown'}-{setting}"
    return setting


def _preload(env: dict) -> None:
    """The shim in LD_PRELOAD (once)."""
    from valkeytrace.tracers.emulation import shim_library

    if shim_library() not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = " ".join(x for x in (env.get("LD_PRELOAD"), shim_library()) if x)


def _environment(plan: RecordPlan, tracer, run_as) -> tuple[dict, Any, Any]:
    """(the server's environment, the virtual offload's stats or None, the stall log or None): the shim
    preloaded for what the emulation asks."""
    from valkeytrace.tracers import offload as voff
    from valkeytrace.tracers.stalls import StallLog

    e = plan.emulation
    env = {**os.environ, **tracer.launch_env()}
    if run_as:
        tracer.chown_region(*run_as)  # the server (as the invoking user) maps the shim's region
    stalls = None
    if e.fsync_delay and e.fsync_delay.get("stall_ns") and plan.server.launched:
        stalls = StallLog()
        if run_as:
            stalls.chown(*run_as)
        env.update(stalls.env())
    offload = None
    if e.offload:
        offload = voff.OffloadStats(e.offload, gather_ns=e.gather_ns, max_pending=e.max_pending, overflow=e.overflow,
                                    replicas=e.offload_replicas, design=e.design)
        if run_as:
            offload.chown(*run_as)
        env.update(offload.env())
        _preload(env)
    if e.fsync_error:
        env["VALKEYTRACE_FSYNC_ERROR"] = e.fsync_error
        _preload(env)
    return env, offload, stalls


def _launch(plan: RecordPlan, env: dict, run_as) -> Target:
    from valkeytrace.server import process as srv

    s = plan.server
    if s.attach_pid:
        return srv.AttachedServer(s.attach_pid)
    if s.command:
        return srv.CommandServer(list(s.command), env=env, run_as=run_as, ready_timeout_s=s.timeout_s)
    config = s.config
    if s.cluster:
        from valkeytrace.server.cluster import node_config

        config = node_config(config, s.cluster_node_timeout_ms)
    elif s.replicas and not any(k.startswith("repl-diskless-sync") for k in config):
        # its replicas are ours and all start now: their full sync begins once all have connected, not after
        # repl-diskless-sync-delay (5 s by default, waiting for more; a replica synced in 6.1 s, 1.1 s with this)
        config = {**config, "repl-diskless-sync-max-replicas": str(s.replicas)}
    return srv.EmbeddedServer(appendfsync=s.appendfsync, io_threads=s.io_threads, server_config=config, port=s.port,
                              binary=s.binary, env=env, run_as=run_as, ready_timeout_s=s.timeout_s)


def _replicas(plan: RecordPlan, target: Target, run_as, offload, cut=None):
    """The replicas, synced; under --offload-replicas replica-blocking each preloads the shim, which reads the
    primary's committed offsets from its offload file; under a power cut (cut) each keeps its own sync record."""
    from valkeytrace.server.replicas import ReplicaSet
    from valkeytrace.tracers.emulation import shim_library
    from valkeytrace.tracers.factory import make_tracer

    s, e, t = plan.server, plan.emulation, plan.tracer
    blocking = offload is not None and e.offload == "durable" and e.offload_replicas == "replica-blocking"
    extra = {"VALKEYTRACE_REPLICA_COMMIT": offload.path, "LD_PRELOAD": shim_library()} if blocking else {}
    replicas = ReplicaSet(target, s.replicas,
                          lambda: make_tracer(t.backend, t.block_threshold_us, e.replicas_delay, t.aof_flush_probe,
                                              t.loop_sample, t.socket_writes),
                          appendfsync=s.appendfsync, io_threads=s.io_threads, server_config=s.config,
                          binary=s.binary, run_as=run_as, ready_timeout_s=s.timeout_s,
                          env_each=lambda: {**extra, **(cut.replica_env(run_as) if cut is not None else {})})
    replicas.wait_synced()
    if cut is not None:
        for i, r in enumerate(replicas.targets, start=1):
            cut.attach(i, r.pid or 0, r.port or 0, decode_as(r.describe(), ServerInfo).config)
    return replicas


def _place(plan: RecordPlan, client, target: Target, server: ServerInfo, replicas):
    """(the client on its CPUs, whether the server's threads were moved to the rest)."""
    from valkeytrace.workload import placement

    threads = server.io_threads or 1
    client = dataclasses.replace(client, cpus=placement.choose(plan.client_cpus, target.pid, threads),
                                 server_ended=target.exit_event)
    rest = None if plan.server.attach_pid else placement.server_cpus_for(client.cpus, os.sched_getaffinity(0), threads)
    if not rest:
        return client, False
    placement.pin(target.pid or 0, rest)  # a server we launched: its threads on the clients' complement
    for r in (replicas.targets if replicas else ()):
        placement.pin(r.pid, rest)
    return client, True


def _emulation(plan: RecordPlan) -> dict | None:
    """The recording's emulation section, or None when nothing is emulated."""
    from valkeytrace.tracers import offload as voff
    from valkeytrace.tracers.emulation import describe_fsync_error, describe_sensitivity

    e = plan.emulation
    if not (e.fsync_delay or plan.sensitivity_ns or e.offload or e.fsync_error):
        return None
    described = (voff.DESCRIPTION.get(e.offload or ""), voff.DESIGN_DESCRIPTION.get(e.design, "") if e.offload else "",
                 voff.REPLICAS_DESCRIPTION[e.offload_replicas] if e.offload == "durable" and plan.server.replicas else "",
                 describe_sensitivity(e.fsync_delay, plan.sensitivity_ns),
                 describe_fsync_error(e.fsync_error) if e.fsync_error else "")
    out: dict = {"fsync_delay": e.fsync_delay, "fsync_sensitivity_ns": list(plan.sensitivity_ns)}
    if e.fsync_error:
        out["fsync_error"] = e.fsync_error
    out["description"] = "; ".join(x for x in described if x)
    if e.offload:
        out["offload"] = {"mode": e.offload, "gather_ns": e.gather_ns, "design": e.design,
                          **({"gather_source": e.gather_source} if e.gather_source else {}),
                          **({"max_pending": e.max_pending, "overflow": e.overflow} if e.max_pending else {}),
                          **({"replicas": e.offload_replicas} if plan.server.replicas else {})}
    return out


def _label(plan: RecordPlan, server: ServerInfo) -> str:
    e = plan.emulation
    if plan.label:
        return plan.label
    if e.offload:
        return (f"virtual-offload-{e.offload}" + (f"-{e.design}" if e.design != "bio-write" else "")
                + (f"-gather-{e.gather_ns / 1e6:g}ms" if e.gather_ns else "")
                + (f"-replicas-{e.offload_replicas}" if plan.server.replicas and e.offload == "durable" else ""))
    return default_label(server, other_binary=plan.server.binary is not None)


def _checked(plan: RecordPlan, server: ServerInfo, echo) -> list[dict]:
    """The warnings this server's settings call for (echoed); a usage error where they contradict the plan."""
    from valkeytrace.tracers.emulation import describe_delay

    e = plan.emulation
    warnings: list[Note] = []
    if e.fsync_delay:
        echo(f"note: {describe_delay(e.fsync_delay)} (an emulated slow disk, not a measured one)")
    if not server.appendonly:
        warnings.append(Note("appendonly_off", {}))
    if e.offload and server.appendfsync != "always":
        raise VTUsageError(f"--emulate-offload emulates #3381, which offloads appendfsync always; this server "
                           f"runs appendfsync {server.appendfsync}")
    for w in warnings:
        echo(f"warning: {warning_text(w)}")
    return [document.warning(w.code, **w.figures) for w in warnings]


def _recorder(plan: RecordPlan, parts: tuple, server: dict, info: ServerInfo, output: str, echo) -> Recorder:
    """The recorder of this launch, its document begun."""
    from valkeytrace.server import process as srv
    from valkeytrace.workload import placement

    target, client, tracer, offload, replicas = parts
    server_moved = False
    if client is not None:
        client, server_moved = _place(plan, client, target, info, replicas)
    warnings = _checked(plan, info, echo)
    doc = document.new_document(
        label=_label(plan, info), server=server, host=system.host_facts(info.config.get("dir")),
        client=None if client is None else {
            "name": client.name, "version": client.version, "path": client.path,
            "placement": placement.describe(client.cpus, target.pid, plan.client_cpus, server_moved)},
        settings=plan.settings.as_recorded(), emulation=_emulation(plan), warnings=warnings)
    recorder = Recorder(target, client, plan.settings, tracer, output, doc, owner=srv.invoking_user(), memo=memo(plan))
    recorder.offload = offload
    if replicas is not None:
        from valkeytrace.server.replicas import node
        from valkeytrace.workload.durability_probe import Prober

        e = plan.emulation
        document.set_nodes(doc, [node(info, "primary", e.fsync_delay)] + replicas.describe(e.replicas_delay))
        recorder.replicas = replicas
        recorder.prober = Prober(target.host, target.port or 0, plan.server.replicas)
    return recorder


def _others(plan: RecordPlan, p: "_Parts", target: Target, run_as) -> None:
    """The launch's other servers: a cluster's nodes (--cluster) or the replicas (--replicas), synced."""
    s = plan.server
    if s.cluster or s.cluster_seed:
        from valkeytrace import cluster_run

        p.cluster = cluster_run.launch(plan, target, run_as, p.cut) if s.cluster else cluster_run.attach(plan, target)
    elif s.replicas:
        p.replicas = _replicas(plan, target, run_as, p.offload, p.cut)


def _failover_cut(plan: RecordPlan, env: dict, run_as):
    """--failover: the power-cut machinery's record of the failing shard's primary's syncs (workload/powercut.py),
    and shard 0's primary's environment (with its shim's log when it is that primary)."""
    from valkeytrace.workload.powercut import PowerCut

    cut = PowerCut(plan.tracer.backend, False, delayed=bool(plan.emulation.fsync_delay))
    s = plan.server
    return cut, cut.environment(env, run_as) if parse_failover(s.failover, s.cluster)[0] == 0 else env


def _clustered(plan: RecordPlan, recorder: Recorder, parts, cut, echo) -> None:
    """record --cluster: the recording's `cluster`, the other nodes traced beside, the load by slot, and under
    --failover the shard's primary killed inside the window (workload/failover.py)."""
    from valkeytrace.workload import placement

    recorder.doc["cluster"] = parts.cluster.describe()
    remote = [f"{n.target.host}:{n.target.port}" for n in parts.cluster.nodes if not n.target.pid]
    if remote:
        echo(f"note: --cluster-seed: not on this host, measured only from the clients: {', '.join(remote)}")
    launched = plan.server.launched
    if launched and recorder.target.pid and recorder.client is not None and (moved := os.sched_getaffinity(recorder.target.pid)):
        for n in parts.cluster.nodes[1:]:  # every node where _place put shard 0's primary: off the clients' CPUs
            placement.pin(n.target.pid or 0, sorted(moved))
    recorder.cluster, recorder.shards = parts.cluster, parts.shards
    if plan.server.failover:
        from valkeytrace.server.cluster import slot_ranges
        from valkeytrace.workload.failover import Failover

        shard, at_s = parse_failover(plan.server.failover, plan.server.cluster)
        node = parts.cluster.primary(shard).target
        cut.attach(0, node.pid or 0, node.port or 0, decode_as(node.describe(), ServerInfo).config)
        recorder.failover = Failover(parts.cluster, shard, at_s, parts.shards[shard].keys_path,
                                     slot_ranges(plan.server.cluster)[shard], cut)


def _measure(plan: RecordPlan, recorder: Recorder, progress: Callable | None) -> bool:
    """The matrix; whether it was interrupted (what was measured is kept)."""
    try:
        measure = plan.measure_overhead and plan.settings.workloads != ("none",)
        if progress is not None:
            progress(recorder, measure)
        else:
            recorder.run(lambda i, n, what: None, measure_overhead=measure)
    except KeyboardInterrupt:
        document.add_warning(recorder.doc, "interrupted")
        return True
    return False


def _ended(doc: dict, offload, tracer, interrupted: bool, t_start: float, backend: str) -> None:
    """The recording finished once the server ended: how it ended and the emulation's exit (its drain,
    what it still held) are in it."""
    if offload is not None:
        # counters stay in runs[].offload; reports derive the figures (analysis/offload.py)
        failure = offload.failure()
        if failure:
            document.add_warning(doc, "offload_failed", failure=failure)
        doc["emulation"]["offload"]["at_exit"] = offload.at_exit()
    document.finish(doc, interrupted=interrupted, tracer=tracer.metadata())
    runs = doc.get("runs") or []
    first = next((r.started_at for r in document.outcomes(doc) if r.started_at), None)
    launch_s = first - (time.time() - (time.monotonic() - t_start)) if first else None
    estimate.remember(backend, launch_s, runs)


def _verify(target: Target, server: ServerInfo, recorder: Recorder, echo, cut=None) -> None:
    """--verify-durability: the server killed, its AOF reloaded by a plain server (as it stands, or as the power
    cut left it: cut, workload/powercut.py), every acknowledged SET looked up; the result on the launch's last run
    (it covers every run's writes, a failed run's too)."""
    from valkeytrace.workload import powercut
    from valkeytrace.workload.durability_check import reload_settings, verify

    runs = recorder.doc["runs"]
    if not runs:
        return
    target.kill()
    cfg = server.config
    binary = getattr(target, "binary", None) or shutil.which(target.command[0]) or target.command[0]
    check = (powercut.verify(cut, binary, recorder.acked) if cut is not None
             else verify(binary, cfg.get("dir") or "", reload_settings(cfg), recorder.acked))
    runs[-1]["durability_check"] = check
    c = decode_as(check, DurabilityCheck)
    if c.error:
        echo(f"warning: --verify-durability: {c.error}")
    if not c.error or c.acked_missing:  # a loss found in what could be read is said all the same
        echo(f"note: --verify-durability {c.method}: {c.acked_missing} of {c.acked} acknowledged keys missing from the "
             + (f"worst of {len(c.states)} power-cut states" if c.states else "reloaded AOF"))
        for r in c.replicas:
            echo(f"note: --verify-durability power-cut: the replica on port {r.port}: {r.acked_missing} of {r.acked} "
                 "acknowledged keys missing from its state at the same cut")


def _announce(plan: RecordPlan, echo) -> None:
    """The plan's notes, and before anything goes into a live server, what will."""
    s, settings = plan.server, plan.settings
    for note in plan.notes:
        echo(f"note: {note}")
    if s.attach_pid and settings.workloads != ("none",):
        mb = max(settings.sizes) * settings.keyspace / 1e6
        echo(f"note: --attach {s.attach_pid} with --workload: this writes into that server: keys key:000000000000 to "
             f"key:{settings.keyspace - 1:012d} in database 0 (up to {mb:,.1f} MB of values at {max(settings.sizes)} B, "
             "replacing any of those keys), and every SET goes to its AOF")


def _power_cut(plan: RecordPlan, env: dict, run_as):
    """--verify-durability power-cut: its machinery (workload/powercut.py) and the primary's environment with its
    shim's log; else (None, env)."""
    if plan.verify_durability != "power-cut":
        return None, env
    from valkeytrace.workload.powercut import PowerCut

    cut = PowerCut(plan.tracer.backend, plan.torn, delayed=bool(plan.emulation.fsync_delay))
    return cut, cut.environment(env, run_as)


def _acked_writes(plan: RecordPlan, cut):
    """--verify-durability: what the clients saw acknowledged, every run's (None without it)."""
    if not plan.verify_durability:
        return None
    from valkeytrace.workload.durability_check import AckedWrites
    from valkeytrace.workload.powercut import CUT_AT

    acked = AckedWrites(plan.settings.keyspace)
    acked.cut_at = CUT_AT if cut is not None else 0.0
    return acked


@dataclass
class _Parts:
    """What a launch started, stopped and removed in one place whatever happened."""
    tracer: Any
    target: Target | None = None
    offload: Any = None
    replicas: Any = None
    stalls: Any = None
    acked: Any = None
    cut: Any = None  # workload.powercut.PowerCut under --verify-durability power-cut
    cluster: Any = None  # cluster_run.ClusterParts under record --cluster

    def stop_servers(self) -> None:
        """Every server of the launch stopped (what was recorded stays)."""
        for x in (self.replicas, self.cluster.cluster if self.cluster is not None else None, self.target):
            if x is not None:
                x.stop()

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        if self.replicas is not None:
            self.replicas.stop()
        if self.target is not None:
            self.target.stop()
        self.tracer.stop()  # idempotent; covers a launch that failed before the recorder started it
        for x in (self.offload, self.acked, self.stalls, self.cut):
            if x is not None:
                x.close()


def run(plan: RecordPlan, progress: Callable | None = None, echo: Callable[[str], None] = print) -> Outcome:
    """Record plan; progress(recorder, measure_overhead) runs the matrix (a progress display),
    echo gets the notes and warnings for the user (one line each)."""
    from valkeytrace.server import process as srv
    from valkeytrace.tracers import offload as voff
    from valkeytrace.tracers.factory import make_tracer
    from valkeytrace.workload.clients import find_client

    s, e, t, settings = plan.server, plan.emulation, plan.tracer, plan.settings
    client = find_client(plan.benchmark_path) if settings.workloads != ("none",) else None
    _announce(plan, echo)
    p = _Parts(make_tracer(t.backend, t.block_threshold_us, e.fsync_delay, t.aof_flush_probe, t.loop_sample,
                           t.socket_writes, delay_control=bool(plan.sensitivity_ns)))
    old_term = signal.signal(signal.SIGTERM, stopping.on_signal)
    old_int = signal.signal(signal.SIGINT, stopping.on_signal)
    t_start, began = time.monotonic(), time.time()
    try:
        run_as = None if s.as_root else srv.invoking_user()
        env, p.offload, p.stalls = _environment(plan, p.tracer, run_as)
        p.cut, env = _power_cut(plan, env, run_as) if not s.failover else _failover_cut(plan, env, run_as)
        p.target = target = _launch(plan, env, run_as)
        server = target.describe()
        info = decode_as(server, ServerInfo)
        if p.cut is not None and not s.failover:
            p.cut.attach(0, target.pid or 0, target.port or 0, info.config)
        _others(plan, p, target, run_as)
        timing = {"began": began, "server_ready": time.time()}
        if p.offload is not None:
            target.drain_state = p.offload.state
            p.offload.load_commands(target.client())  # before any load: the shim holds what the server's table says
            voff.check_engaged(target.pid or 0)
        output = plan.output or f"valkeytrace-{_label(plan, info)}-{time.strftime('%Y%m%d-%H%M%S')}.vtrace"
        recorder = _recorder(plan, (target, client, p.tracer, p.offload, p.replicas), server, info, output, echo)
        recorder.stalls, doc = p.stalls, recorder.doc
        if p.cluster is not None:
            _clustered(plan, recorder, p.cluster, p.cut, echo)
        doc["timing"] = timing
        recorder.checkpoint()
        recorder.acked = p.acked = _acked_writes(plan, p.cut)
        interrupted = _measure(plan, recorder, progress)
        if p.acked is not None and not interrupted:
            _verify(target, info, recorder, echo, p.cut)
        p.stop_servers()  # the server ends before the recording is written
        timing["ended"] = time.time()
        _ended(doc, p.offload, p.tracer, interrupted, t_start, t.backend)
        try:
            recorder.finish()
        except VTError as exc:
            raise VTError(f"{exc}; what was measured is in {recorder.partial_path}") from exc
    finally:
        p.close()
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
    return Outcome(doc, output, interrupted)
