"""The words of the facts each side stands on (analysis/facts.py: where the fsyncs ran and what the
main thread did, what a write waited for, the offload's jobs, #3381's own counts, the SET's
mechanism beside the seed's reading), of the caveats a cell carries, and of the server's own view:
templates from each record's figures (SIDES, CAVEATS), part of reporters/claims.py's one table."""
from __future__ import annotations

from typing import Any, Callable

from valkeytrace.analysis import facts


def fmt_time(us: float | None) -> str:
    """A time in µs said in its unit: '215 µs', '4.91 ms', '1.20 s' (every report's one formatter)."""
    if us is None:
        return "n/a"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"



def _pct(x: float) -> str:
    return f"{x:+.0f}%".replace("-", "\u2212")


def _delta(us: float) -> str:
    return ("+" if us >= 0 else "\u2212") + fmt_time(abs(us))


def _placed(p: facts.Placement) -> str:
    if p.in_flight:
        return (f"fdatasync runs on {p.role} (none completed in the window: it was blocked inside "
                f"one for {fmt_time((p.blocked_ms or 0) * 1000)} of it)")
    return f"fdatasync runs on {p.role} ({p.per_s or 0:.1f}/s, p50 {fmt_time(p.p50_us)})"


def _where(w: facts.Where) -> str:
    if w.no_server:
        return f"{w.label}: no server figures."
    main = next((p for p in w.placements if p.role == "main"), None)
    if main:
        parts = [f"the main thread spent {w.blocked_in_fsync_pct:.0f}% of wall time blocked in fdatasync "
                 + ("(inside one that did not complete in the window)" if main.in_flight else
                    f"({main.per_s or 0:.0f}/s, p50 {fmt_time(main.p50_us)})")]
    else:
        parts = ["the main thread is never blocked in fsync"]
    parts += [_placed(p) for p in w.placements if p.role != "main"]
    if not w.placements:
        parts.append("no thread called fsync in the window")
    if w.loop_tw_p50_us:
        parts.append(f"loop iteration p50 {fmt_time(w.loop_tw_p50_us)} (time-weighted, sampled)"
                     + (f"; the client latency spans {w.latency_us / w.loop_tw_p50_us:.1f} loop iterations"
                        if w.latency_us else ""))
    elif w.loop_iteration_mean_us and w.loop_iterations_per_s:
        parts.append(f"{w.loop_iterations_per_s:.0f} loop iterations/s, mean {fmt_time(w.loop_iteration_mean_us)}")
    if (w.waiting_for_cpu_pct or 0) >= 10:
        parts.append(f"it waited for a CPU {w.waiting_for_cpu_pct:.0f}% of the time")
    return f"{w.label}: " + "; ".join(parts) + "."


def _cohorts(k: int | None) -> str:
    return {1: "one cohort", 2: "two cohorts"}.get(k or 0) or (f"{k} cohorts taking turns" if k else "cohorts not counted")


def _cohort_words(k: int | None, unit: str) -> str:
    if k == 1:
        return f"{_cohorts(k)}: every client's write rides the same {unit}"
    if k == 2:
        return (f"{_cohorts(k)}: a write that arrives while the other cohort's {unit} is in flight waits it out, "
                "then its own")
    return _cohorts(k)


def _durability(d: facts.SideDurability) -> str:
    unit = "fsync cycle" if d.thread == "main" else "job"
    return (f"{d.label}: each SET waited {d.jobs_waited:.1f} {unit}s of {d.job_ms:.2f} ms on "
            f"{d.thread} ({d.jobs_per_s:.0f}/s, {d.writes_per_job:.1f} writes {'an' if unit[0] == 'f' else 'a'} {unit}"
            + (f"; a released cohort's next writes arrive within {d.spread_us:.0f} µs" if d.spread_us is not None else "")
            + f", from the kernel's timestamps): {_cohort_words(d.cohorts, unit)}.")


def _offload_jobs(j: facts.OffloadJobs) -> str:
    how = ("the clients answer in two cohorts: a SET that arrives while a job is in flight waits it out, then "
           "its own" if j.jobs_waited >= 1.5 else "one batch per round trip: group commit")
    return (f"{j.label}: each SET waited {j.jobs_waited:.1f} jobs of {j.job_ms:.2f} ms (a batch's write + fdatasync on "
            f"{j.thread}; {j.sets_per_job:.1f} SETs a job, {j.held_replies:,} replies held): {how}.")


HELD = {"write_blocked_count": "writes held", "read_blocked_count": "reads held",
        "clients_waiting_ack": "clients waiting for an ack"}


def _reply_blocking(r: facts.ReplyBlocking) -> str:
    if not r.runs:
        return (f"{r.label}: #3381's offload is on (bio-aof-offload-enabled yes), but its INFO debug gave no "
                "reply_blocking fields: the replies it held are not counted.")
    return (f"{r.label}: #3381's own count (INFO debug reply_blocking, at the window's end, median of "
            f"{r.runs} run(s)): " + ", ".join(f"{HELD[k]} {v:,}" for k, v in r.counts) + "; the wait for each batch "
            "is not split out (a real build counts no jobs per reply: record --emulate-offload measures them).")


def seed_reading(r: facts.SeedReading) -> str:
    n, b, c = r.clients, r.base, r.cand
    return (f"the seed's write-only 64 B SET went {b.tps / 1000:.2f}K/s at p50 {b.p50_us / 1000:.1f} ms "
            f"({r.in_flight:.0f} SETs in flight by Little's law: its {n} clients; two cohorts: "
            f"{r.cycles_per_s:.0f} cycles/s of {n // 2} SETs, {r.cycle_ms:.2f} ms each) to "
            f"{c.tps / 1000:.2f}K/s at {c.p50_us / 1000:.2f} ms: either one cohort "
            f"({r.one_jobs_per_s:.0f} jobs/s of {n} SETs, {r.one_job_ms:.2f} ms a job, as long as the cycle before: "
            f"one wait instead of two) or two cohorts with the fsync twice as fast off the main thread "
            f"({r.two_jobs_per_s:.0f} jobs/s of {n // 2}, {r.two_job_ms:.2f} ms a job)")


def _mechanism(m: facts.SetMechanism) -> str:
    (cb, cc), (wb, wc), (jb, jc) = m.cohorts, m.waited, m.job_ms
    if m.what == "cohorts":
        what = f"the cohorts ({cb} -> {cc}): a write waits {wb:.1f} -> {wc:.1f} of them, each {jb:.2f} -> {jc:.2f} ms"
    elif m.what == "job_length":
        what = f"each job's length ({jb:.2f} -> {jc:.2f} ms, a faster fsync), {wb:.1f} -> {wc:.1f} a write"
    else:
        what = f"neither: a write waits {wb:.1f} -> {wc:.1f} jobs of {jb:.2f} -> {jc:.2f} ms, the same {_cohorts(cc)}"
    return f"The SET's mechanism: {what}. For reference, {seed_reading(m.seed)}."


SIDES: dict[type, Callable[[Any], str]] = {
    facts.Where: _where, facts.SideDurability: _durability, facts.OffloadJobs: _offload_jobs,
    facts.ReplyBlocking: _reply_blocking, facts.SetMechanism: _mechanism,
}


def _shared(c: facts.ClientsSharedCpu) -> str:
    cpus = ("CPUs " if len(c.cpus) > 1 else "CPU ") + ",".join(str(x) for x in c.cpus)
    return (f"the GET and the background SET clients shared {cpus} (--client-cpus auto on a host with too few CPUs "
            "to give each its own): each waited for the other's turn on it, which shows in their tails (p95/p99)")


def _own_time(c: facts.ClientsOwnTime) -> str:
    parts = [f"{x.op} {x.in_flight:.1f} of {x.clients} clients in flight"
             + ("" if x.waited is None else f" (they waited for a CPU {100 * x.waited:.0f}% of their time)")
             for x in c.low]
    return ("TPS x mean latency: " + ", ".join(parts) + ": the clients spend time of their own between requests"
            + (" (a CPU-bound benchmark client?)" if c.unknown else "")
            + ("; the latency they report holds some of that CPU wait too, not only the server's" if c.held else ""))


CAVEATS: dict[type, Callable[[Any], str]] = {
    facts.Emulation: lambda c: c.description,
    facts.ClientsSharedCpu: _shared,
    facts.ClientsWaitedCpu: lambda c: (f"the {c.op} clients waited for a CPU {100 * c.waited:.0f}% of their time: the "
                                       "latency they report holds some of that wait too, not only the server's"),
    facts.LittlesLawInconsistent: lambda c: (f"{c.op} TPS x mean latency = {c.in_flight:.1f} exceeds {c.clients} "
                                             "clients: the recording is inconsistent"),
    facts.ClientsOwnTime: _own_time,
    facts.HypervisorSteal: lambda c: (f"the hypervisor took more than {c.over:.0%} of the server's CPU time (steal: in "
                                      "the main thread's on-CPU time by its context switches, not in schedstat's; "
                                      "--detail has the figures)"),
    facts.MainCpuBound: lambda c: f"the main thread waited for a CPU {c.waiting_pct:.0f}% of the time (CPU-bound host)",
    facts.DurabilityDiffers: lambda c: (f"durability differs: {c.loose} (appendfsync={c.appendfsync}) acknowledges SETs "
                                        "before their fsync, the other after (as appendfsync always and #3381's "
                                        "offload do): SET rows are not comparable for durability"),
}


def gap_text(g: facts.ServerViewGap) -> str:
    """What the server's INFO latencystats says against the clients (valkey times a command with a
    microsecond clock: a sub-µs command is recorded as 1 ns)."""
    p50 = g.server_p50_us
    return (f"the server's INFO latencystats puts {g.op} p50 {'under 1 µs' if p50 < 1 else f'at {p50:.3g} µs'}, "
            f"clients measured {fmt_time(g.client_p50_us)}: latencystats times command execution only, not the wait "
            "for the event loop (and the fsync in it) before the command runs and before its reply is written")
