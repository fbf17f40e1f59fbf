"""One typed plan for a recording: what to launch, the matrix, the tracer, the emulation.

`record` builds a RecordPlan from its options, `compare` builds one per side from the common
options and the side's own (RecordPlan.for_side), and the session (valkeytrace.session) runs a
plan. Every check an option needs (usage errors, before any server starts) is made here, once:
a new option is a field here, its check in build(), and a click option in cli/options.py.

A plan is JSON-able (as_json/from_json): `compare` hands each launch's plan to a `record` child
(a fresh process a launch, as a user's two `record`s would be).
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from valkeytrace.errors import VTUsageError
from valkeytrace.recorder import Settings

EMBEDDED_ONLY = ("appendfsync", "io_threads", "server_config", "server_binary")


@dataclass(frozen=True)
class ServerPlan:
    """What to run the workloads against: the embedded server (or another binary under its
    settings), a SERVER_COMMAND, or a running server (--attach)."""
    appendfsync: str = "always"
    io_threads: int | None = None
    config: dict = field(default_factory=dict)
    binary: str | None = None          # --server-binary: another build, the embedded server's settings
    command: tuple = ()                # -- SERVER_COMMAND ...
    attach_pid: int | None = None
    as_root: bool = False
    timeout_s: float = 15.0

    @property
    def launched(self) -> bool:
        return self.attach_pid is None


@dataclass(frozen=True)
class TracerPlan:
    backend: str = "auto"              # resolved by build(): ebpf, shim, both or none
    block_threshold_us: float = 100.0
    aof_flush_probe: bool = False
    loop_sample: bool = False
    socket_writes: bool = False


@dataclass(frozen=True)
class EmulationPlan:
    fsync_delay: dict | None = None    # tracers.emulation.parse_fsync_delay's
    offload: str | None = None         # durable, early-ack
    gather_ns: int = 0                 # --offload-gather: a job starts this long after its first write
    # --fsync-sensitivity's levels are the matrix's (Settings.sensitivity): one copy


@dataclass(frozen=True)
class RecordPlan:
    server: ServerPlan
    settings: Settings
    tracer: TracerPlan
    emulation: EmulationPlan
    benchmark_path: str | None = None
    client_cpus: str = "auto"
    label: str | None = None
    output: str | None = None
    measure_overhead: bool = False
    notes: tuple = ()                  # for the user, e.g. what --backend auto chose

    @property
    def sensitivity_ns(self) -> tuple:
        return self.settings.sensitivity

    def for_side(self, *, binary=None, config=None, label=None, fsync_delay=None, offload=None, gather_ns=None,
                 sensitivity_ns=None, sensitivity_runs=None) -> "RecordPlan":
        """This plan for one side of a comparison: its binary, extra config (on top of the common
        one), label and emulation; None leaves the common value."""
        server = dataclasses.replace(self.server, binary=binary or self.server.binary,
                                     config={**self.server.config, **(config or {})})
        emulation = dataclasses.replace(self.emulation,
                                        fsync_delay=fsync_delay if fsync_delay is not None else self.emulation.fsync_delay,
                                        offload=offload or self.emulation.offload,
                                        gather_ns=gather_ns if gather_ns is not None else self.emulation.gather_ns)
        settings = dataclasses.replace(self.settings,
                                       sensitivity=tuple(sensitivity_ns) if sensitivity_ns else self.settings.sensitivity,
                                       sensitivity_runs=sensitivity_runs or self.settings.sensitivity_runs)
        plan = dataclasses.replace(self, server=server, emulation=emulation, settings=settings,
                                   label=label or self.label)
        plan.check()
        return plan

    def check(self) -> None:
        """The usage errors a combination of fields makes (one line each, before anything starts)."""
        self.check_target()
        t = self.tracer
        ebpf_only = [flag for flag, on in (("--aof-flush-probe", t.aof_flush_probe), ("--loop-sample", t.loop_sample)) if on]
        if ebpf_only and t.backend not in ("ebpf", "both"):
            raise VTUsageError(f"{', '.join(ebpf_only)} needs the eBPF backend (this run's backend is {t.backend})")
        if t.socket_writes and t.backend == "none":
            raise VTUsageError("--socket-writes needs a tracer: --backend ebpf, shim or both")
        if self.sensitivity_ns and t.backend == "none":
            raise VTUsageError("--fsync-sensitivity needs a tracer to measure the fsync time it moves: "
                               "--backend ebpf, shim or both")

    def check_target(self) -> None:
        """What the server and the emulation allow, whatever tracer the host offers."""
        from valkeytrace.tracers import offload as voff
        from valkeytrace.workload.scenarios import SCENARIOS

        s, e = self.server, self.emulation
        if s.command and s.attach_pid:
            raise VTUsageError("give either a SERVER_COMMAND or --attach PID, not both")
        if e.fsync_delay and not s.launched:
            raise VTUsageError("--inject-fsync-delay needs a server valkeytrace launches (it preloads "
                               "the shim); it cannot apply to --attach")
        voff.check_usage(e.offload, s.appendfsync, not s.launched, bool(s.command))
        if e.gather_ns and e.offload != "durable":
            raise VTUsageError("--offload-gather shapes the durable virtual offload's jobs: it needs "
                               "--emulate-offload durable")
        if self.sensitivity_ns and not s.launched:
            raise VTUsageError("--fsync-sensitivity needs a server valkeytrace launches (it preloads "
                               "the shim to add the delay); it cannot apply to --attach")
        if self.sensitivity_ns and not any(SCENARIOS[w].drives_load for w in self.settings.workloads):
            raise VTUsageError("--fsync-sensitivity needs a workload: with --workload none there is no "
                               "client latency to relate to the fsync time")

    def as_json(self) -> str:
        d = dataclasses.asdict(self)
        d["settings"] = dataclasses.asdict(self.settings)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "RecordPlan":
        d = json.loads(text)
        st = d["settings"]
        settings = Settings(**{**st, "workloads": tuple(st["workloads"]), "sizes": tuple(st["sizes"]),
                               "sensitivity": tuple(st["sensitivity"])})
        return cls(server=ServerPlan(**{**d["server"], "command": tuple(d["server"]["command"])}),
                   settings=settings, tracer=TracerPlan(**d["tracer"]),
                   emulation=EmulationPlan(**d["emulation"]),
                   **{k: d[k] for k in ("benchmark_path", "client_cpus", "label", "output", "measure_overhead")},
                   notes=tuple(d.get("notes") or ()))


def build(*, server_command=(), attach_pid=None, appendfsync="always", io_threads=None, server_binary=None,
          server_config=None, workloads=(), sizes=(64,), repeat=3, duration=10.0, keyspace=100000,
          get_clients=50, set_clients=8, write_clients=50, benchmark_path=None, client_cpus="auto",
          backend="auto", label=None, output=None, block_threshold_us=100.0, inject_spec=None,
          as_root=False, server_timeout=15.0, aof_flush_probe=False, loop_sample=False, socket_writes=False,
          offload_mode=None, offload_gather=None, sensitivity_spec=None, sensitivity_runs=3, measure_overhead=False,
          embedded_only_given=()) -> RecordPlan:
    """The plan from record's options (parsed values); embedded_only_given: the EMBEDDED_ONLY
    options the user gave (refused with a SERVER_COMMAND or --attach). Raises VTUsageError."""
    from valkeytrace.tracers.emulation import parse_fsync_delay, parse_gather, parse_sensitivity
    from valkeytrace.tracers.factory import resolve_backend
    from valkeytrace.workload import placement

    if (server_command or attach_pid) and embedded_only_given:
        given = ", ".join(f"--{p.replace('_', '-')}" for p in embedded_only_given)
        raise VTUsageError(f"{given} only shape the embedded server; with a SERVER_COMMAND or --attach, "
                           "configure the server itself")
    if output:
        outdir = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(outdir):
            raise VTUsageError(f"-o {output}: directory {outdir} does not exist")
        if not os.access(outdir, os.W_OK):
            raise VTUsageError(f"-o {output}: directory {outdir} is not writable")
    if client_cpus not in ("auto", "none"):
        placement.choose(client_cpus, None, 1)  # a bad list is a usage error before any server starts
    server = ServerPlan(appendfsync=appendfsync, io_threads=io_threads, config=dict(server_config or {}),
                        binary=server_binary, command=tuple(server_command), attach_pid=attach_pid,
                        as_root=as_root, timeout_s=server_timeout)
    emulation = EmulationPlan(fsync_delay=parse_fsync_delay(inject_spec) if inject_spec else None, offload=offload_mode,
                              gather_ns=parse_gather(offload_gather) if offload_gather else 0)
    settings = Settings(workloads=tuple(workloads), sizes=tuple(sizes), repeat=repeat, duration_s=duration,
                        keyspace=keyspace, get_clients=get_clients, set_clients=set_clients,
                        write_clients=write_clients, backend=backend,
                        sensitivity=tuple(parse_sensitivity(sensitivity_spec)) if sensitivity_spec else (),
                        sensitivity_runs=sensitivity_runs)
    plan = RecordPlan(server, settings, TracerPlan(backend), emulation, benchmark_path=benchmark_path,
                      client_cpus=client_cpus, label=label, output=output, measure_overhead=measure_overhead)
    plan.check_target()  # usage errors whatever tracer the host offers, before asking it
    backend, note = resolve_backend(backend, attached=attach_pid is not None)
    plan = dataclasses.replace(plan, settings=dataclasses.replace(settings, backend=backend),
                               tracer=TracerPlan(backend=backend, block_threshold_us=block_threshold_us,
                                                 aof_flush_probe=aof_flush_probe, loop_sample=loop_sample,
                                                 socket_writes=socket_writes),
                               notes=(note,) if note else ())
    plan.check()
    return plan
