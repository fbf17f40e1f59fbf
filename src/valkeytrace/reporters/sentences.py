"""The report's words for what the analysis hands over as codes and figures: one table of templates
for the warnings (WARNINGS: code -> the sentence made from its figures), the server's end, the
tracer's overhead and an explanation's share. The analysis and the recorder never write these
sentences; every reporter (and record's own echo) renders them from here."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from valkeytrace.analysis.note import Note


def _run(f: Mapping[str, Any]) -> str:
    """'read-heavy 64 B #1' (with ' launch 2' when the figures name one)."""
    launch = f" launch {f['launch']}" if f.get("launch") else ""
    return f"{f['workload']} {f['value_size']} B{launch} #{f['repeat']}"


def how_ended(f: Mapping[str, Any], attached: str = "ended") -> str:
    """'was killed by SIGKILL', 'shut down on SIGTERM (exit status 0)', 'exited with status 1', or
    `attached` when the process table did not say (an attached server)."""
    signal, status = f.get("signal"), f.get("status")
    if signal and status is None:
        return f"was killed by {signal}"
    if signal:
        return f"shut down on {signal} (exit status {status})"
    if status is not None:
        return f"exited with status {status}"
    return attached


def how_ended_why(f: Mapping[str, Any], attached: str = "ended") -> str:
    """how_ended, and the server's own last words after an exit status: 'exited with status 1: why'."""
    return how_ended(f, attached) + (f": {f['cause']}" if f.get("cause") and f.get("status") is not None else "")


def _server_ended(f: Mapping[str, Any]) -> str:
    at = f", {f['at_s']:.2f} s into its window" if f.get("at_s") is not None else ""
    return (f"the server {how_ended_why(f, 'ended' if f.get('gone') else 'died')} during {f['workload']} {f['value_size']} B repeat {f['repeat']}"
            f"{at}; {f['not_measured']} run(s) not measured")


def _missed_fsync(f: Mapping[str, Any]) -> str:
    always = f["appendfsync"] == "always"
    return (f"{_run(f)}: no fsync seen on any thread in a {f['window_s']:.1f} s window with {f['aof_writes']:,} AOF "
            f"writes under appendfsync {f['appendfsync']} (the server fsyncs "
            f"{'after each write' if always else 'about once a second'}): a probe missed them, or the server did "
            "not fsync; this window's fsync figures are not to be trusted")


def _schedstat(f: Mapping[str, Any]) -> str:
    what = "on-CPU" if f["measure"] == "on_cpu" else "run-queue (waiting for a CPU)"
    stolen = (f" (the hypervisor's steal on the server's CPUs, {f['steal_ms']:,.1f} ms, does not account for it)"
              if f.get("steal_ms") else "")
    return (f"{f['role']}: {what} time {f['ebpf_ms']:,.1f} ms by eBPF, {f['kernel_ms']:,.1f} ms by the kernel's "
            f"schedstat over {f['window_s']:.1f} s of windows{stolen}: the tracer missed or misplaced scheduler "
            "events; this role's time budget is not to be trusted")


def _backends(f: Mapping[str, Any]) -> str:
    what = "fsync" if f["call"] == "fsync" else "AOF write"
    top = max(f["ebpf"], f["shim"])
    return (f"{f['role']}: {f['ebpf']:,} {what} calls by eBPF, {f['shim']:,} by the shim (--backend both): the "
            f"backends disagree by {100 * abs(f['ebpf'] - f['shim']) / top:.0f}%")


def _stall(f: Mapping[str, Any]) -> str:
    return (f"the main thread stalled in {_run(f)}: {f['intervals']} interval(s) of {f['threshold_ms']:.0f} ms or "
            f"more outside any fsync, AOF write or poll, the longest {f['longest_ms']:,.0f} ms (DEBUG SLEEP, "
            "SIGSTOP, a page-fault storm...): a stall of the server, not a slow disk nor a wait for a CPU")


WARNINGS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "recorded": lambda f: str(f["text"]),  # a recording from before warnings had codes
    "appendonly_off": lambda f: "appendonly is off on this server: there is no AOF fsync to explain",
    "interrupted": lambda f: "recording interrupted: runs after the last completed one were not measured",
    "offload_failed": lambda f: f"virtual offload: {f['failure']}; nothing was acknowledged after it",
    "server_ended": _server_ended,
    "merge_unpaired": lambda f: (f"valkeytrace merge: {f['windows']} of the primary's windows overlap no window of "
                                 "the replica; they have no replication figures"),
    "missed_fsync": _missed_fsync,
    "schedstat": _schedstat,
    "backends": _backends,
    "stall": _stall,
    "obuf_closed": lambda f: (f"virtual offload: {f['clients']} client(s) closed over their client-output-buffer-limit "
                              "(the replies held for them counted against it, as the server counts its own buffer)"),
    "held_dropped": lambda f: (f"virtual offload: {f['replies']} held replies were still held when the server ended "
                               "(never written: their connections closed with it)"),
}


def warning_text(note: Note) -> str:
    """The sentence of one coded warning; an unknown code (a newer recording) says its figures."""
    template = WARNINGS.get(note.code)
    if template is None:
        return f"{note.code}: " + ", ".join(f"{k} {v}" for k, v in note.figures.items())
    return template(note.figures)


def warning_texts(notes: list[Note]) -> list[str]:
    """Each distinct warning's sentence once, in order."""
    return list(dict.fromkeys(warning_text(n) for n in notes))


def exit_sentence(label: str, e) -> str:
    """'fsync-always: THE SERVER ENDED: it was killed by SIGKILL 4.21 s into the window of none 64 B #1:
    its figures cover the 4.21 s it lived; ...' (e: an analysis.report.ServerExitRecord)."""
    how = how_ended({"signal": e.signal, "status": e.status}, "ended (attached: how, the process table does not say)")
    run = _run({"workload": e.workload, "value_size": e.value_size, "launch": e.launch, "repeat": e.repeat})
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
