"""The report's words for what the analysis hands over as codes and figures: the warnings' templates
(WARNING_TYPES: code -> its figures' declared type; WARNING_TEMPLATES: that type -> its sentence, part of
reporters/claims.TEMPLATES, the one table of words), the server's end, the
tracer's overhead and an explanation's share. The analysis and the recorder never write these
sentences; every reporter (and record's own echo) renders them from here."""
from __future__ import annotations

from typing import Any, Callable

import msgspec

from valkeytrace.analysis.note import Note


class Ended(msgspec.Struct, kw_only=True):
    """How a server ended: the signal that killed it or it shut down on, its exit status, its last words."""
    signal: str | None = None
    status: int | None = None
    cause: str | None = None


class RunRef(msgspec.Struct, kw_only=True):
    """The run a warning is about."""
    workload: str = "?"
    value_size: int = 0
    repeat: int = 0
    launch: int | None = None


class ServerEnded(RunRef, kw_only=True):
    signal: str | None = None
    status: int | None = None
    cause: str | None = None
    at_s: float | None = None
    gone: bool = False
    not_measured: int = 0


class MissedFsync(RunRef, kw_only=True):
    appendfsync: str
    window_s: float
    aof_writes: int


class Schedstat(msgspec.Struct, kw_only=True):
    role: str
    measure: str
    ebpf_ms: float
    kernel_ms: float
    window_s: float
    steal_ms: float | None = None


class Backends(msgspec.Struct, kw_only=True):
    role: str
    call: str
    ebpf: int
    shim: int


class Stall(RunRef, kw_only=True):
    intervals: int
    threshold_ms: float
    longest_ms: float


def _run(f: RunRef) -> str:
    """'read-heavy 64 B #1' (with ' launch 2' when the figures name one)."""
    launch = f" launch {f.launch}" if f.launch else ""
    return f"{f.workload} {f.value_size} B{launch} #{f.repeat}"


def how_ended(f: Ended | ServerEnded, attached: str = "ended") -> str:
    """'was killed by SIGKILL', 'shut down on SIGTERM (exit status 0)', 'exited with status 1', or
    `attached` when the process table did not say (an attached server)."""
    if f.signal and f.status is None:
        return f"was killed by {f.signal}"
    if f.signal:
        return f"shut down on {f.signal} (exit status {f.status})"
    if f.status is not None:
        return f"exited with status {f.status}"
    return attached


def how_ended_why(f: Ended | ServerEnded, attached: str = "ended") -> str:
    """how_ended, and the server's own last words after an exit status: 'exited with status 1: why'."""
    return how_ended(f, attached) + (f": {f.cause}" if f.cause and f.status is not None else "")


def _server_ended(f: ServerEnded) -> str:
    at = f", {f.at_s:.2f} s into its window" if f.at_s is not None else ""
    return (f"the server {how_ended_why(f, 'ended' if f.gone else 'died')} during {f.workload} {f.value_size} B repeat "
            f"{f.repeat}{at}; {f.not_measured} run(s) not measured")


def _missed_fsync(f: MissedFsync) -> str:
    always = f.appendfsync == "always"
    return (f"{_run(f)}: no fsync seen on any thread in a {f.window_s:.1f} s window with {f.aof_writes:,} AOF "
            f"writes under appendfsync {f.appendfsync} (the server fsyncs "
            f"{'after each write' if always else 'about once a second'}): a probe missed them, or the server did "
            "not fsync; this window's fsync figures are not to be trusted")


def _schedstat(f: Schedstat) -> str:
    what = "on-CPU" if f.measure == "on_cpu" else "run-queue (waiting for a CPU)"
    stolen = (f" (the hypervisor's steal on the server's CPUs, {f.steal_ms:,.1f} ms, does not account for it)"
              if f.steal_ms else "")
    return (f"{f.role}: {what} time {f.ebpf_ms:,.1f} ms by eBPF, {f.kernel_ms:,.1f} ms by the kernel's "
            f"schedstat over {f.window_s:.1f} s of windows{stolen}: the tracer missed or misplaced scheduler "
            "events; this role's time budget is not to be trusted")


def _backends(f: Backends) -> str:
    what = "fsync" if f.call == "fsync" else "AOF write"
    top = max(f.ebpf, f.shim)
    return (f"{f.role}: {f.ebpf:,} {what} calls by eBPF, {f.shim:,} by the shim (--backend both): the "
            f"backends disagree by {100 * abs(f.ebpf - f.shim) / top:.0f}%")


def _stall(f: Stall) -> str:
    return (f"the main thread stalled in {_run(f)}: {f.intervals} interval(s) of {f.threshold_ms:.0f} ms or "
            f"more outside any fsync, AOF write or poll, the longest {f.longest_ms:,.0f} ms (DEBUG SLEEP, "
            "SIGSTOP, a page-fault storm...): a stall of the server, not a slow disk nor a wait for a CPU")


def _figures(code: str, *fields: tuple[str, type]) -> type:
    """The figures' declared type of a warning whose figures need no class of their own."""
    return msgspec.defstruct("".join(w.title() for w in code.split("_")), list(fields), kw_only=True)


# code -> the declared type of its figures; the sentence is TEMPLATES[that type] (claims.TEMPLATES holds
# these beside the claims' and the facts': one table of words)
Recorded = _figures("recorded", ("text", str))  # a recording from before warnings had codes
AppendonlyOff, Interrupted = _figures("appendonly_off"), _figures("interrupted")
OffloadFailed, MergeUnpaired = _figures("offload_failed", ("failure", str)), _figures("merge_unpaired", ("windows", int))
ObufClosed, HeldDropped = _figures("obuf_closed", ("clients", int)), _figures("held_dropped", ("replies", int))
WARNING_TYPES: dict[str, type] = {
    "recorded": Recorded, "appendonly_off": AppendonlyOff, "interrupted": Interrupted, "offload_failed": OffloadFailed,
    "server_ended": ServerEnded, "merge_unpaired": MergeUnpaired, "missed_fsync": MissedFsync, "schedstat": Schedstat,
    "backends": Backends, "stall": Stall, "obuf_closed": ObufClosed, "held_dropped": HeldDropped,
}
WARNING_TEMPLATES: dict[type, Callable[[Any], str]] = {
    Recorded: lambda f: str(f.text),
    AppendonlyOff: lambda f: "appendonly is off on this server: there is no AOF fsync to explain",
    Interrupted: lambda f: "recording interrupted: runs after the last completed one were not measured",
    OffloadFailed: lambda f: f"virtual offload: {f.failure}; nothing was acknowledged after it",
    ServerEnded: _server_ended,
    MergeUnpaired: lambda f: (f"valkeytrace merge: {f.windows} of the primary's windows overlap no window of "
                              "the replica; they have no replication figures"),
    MissedFsync: _missed_fsync, Schedstat: _schedstat, Backends: _backends, Stall: _stall,
    ObufClosed: lambda f: (f"virtual offload: {f.clients} client(s) closed over their client-output-buffer-limit "
                           "(the replies held for them counted against it, as the server counts its own buffer)"),
    HeldDropped: lambda f: (f"virtual offload: {f.replies} held replies were still held when the server ended "
                            "(never written: their connections closed with it)"),
}


def warning_text(note: Note) -> str:
    """The sentence of one coded warning; an unknown code (a newer recording), or figures that are not
    the code's, says its figures."""
    t = WARNING_TYPES.get(note.code)
    if t is not None:
        try:
            return WARNING_TEMPLATES[t](msgspec.convert(note.figures, t, strict=False))
        except (msgspec.ValidationError, TypeError):
            pass
    return f"{note.code}: " + ", ".join(f"{k} {v}" for k, v in note.figures.items())


def warning_texts(notes: list[Note]) -> list[str]:
    """Each distinct warning's sentence once, in order."""
    return list(dict.fromkeys(warning_text(n) for n in notes))


def exit_sentence(label: str, e) -> str:
    """'fsync-always: THE SERVER ENDED: it was killed by SIGKILL 4.21 s into the window of none 64 B #1:
    its figures cover the 4.21 s it lived; ...' (e: an analysis.report.ServerExitRecord)."""
    how = how_ended(Ended(signal=e.signal, status=e.status), "ended (attached: how, the process table does not say)")
    run = _run(RunRef(workload=e.workload, value_size=e.value_size, launch=e.launch, repeat=e.repeat))
    if e.in_window and e.at_s is not None:
        where = f" {e.at_s:.2f} s into the window of {run}: its figures cover the {e.at_s:.2f} s it lived"
    else:
        where = f" during {run}, before its window: nothing of it was measured"
    cause = f" (its last words: {e.cause})" if e.cause else ""
    return f"{label}: THE SERVER ENDED: it {how}{where}{cause}; no run after it was measured."


def share_tag(entry, compared: bool) -> str:
    """What an explanation's heading says of its share: 'explained share 0.92' for a significant
    change, 'significance unknown' when n < 2, 'fsync + AOF write: 0.87 of it' for one recording."""
    share = entry.explained_share
    if not compared:
        return f"fsync + AOF write: {share:.2f} of it" if share is not None else ""
    if entry.significant and share is not None:
        return f"explained share {share:.2f}"
    if entry.significant is None and entry.components:
        return "significance unknown"
    return ""


def overhead_line(run) -> str:
    """The --measure-overhead result, as one sentence ('' when not measured; run: an AnalysedRun)."""
    o = run.doc.overhead
    if not o or not o.get_tps_ratio:
        return ""
    p99 = f", GET p99 x{o.get_p99_ratio:.3f}" if o.get_p99_ratio else ""
    order = f", {o.order}" if o.order else ""
    untraced = f"; untraced = {o.untraced_side}" if o.untraced_side else ""
    return (f"tracer overhead ({o.backend}, {o.cell}, one untraced/traced pair of "
            f"{o.duration_s} s{order}{untraced}): GET TPS x{o.get_tps_ratio:.3f}{p99} "
            "(one pair: an indication; benchmarks/peers.py measures it)")
