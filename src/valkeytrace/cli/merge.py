"""`valkeytrace merge A.vtrace B.vtrace ... -o system.vtrace`: one system from its nodes' recordings."""
from __future__ import annotations

import os

import click

from valkeytrace.errors import VTUsageError
from valkeytrace.recording import format as recfmt
from valkeytrace.recording.model import Document, decode


def _estimate(primary: Document, replica: Document, pairs: list[tuple[int, int]], guess_ns: int):
    """The replica's clock offset from every paired window's replication exchange (their bounds met)."""
    from valkeytrace.analysis import replink

    found = []
    for i, j in pairs:
        p = replink.node_events(primary.runs[i].server)
        r = replink.node_events(replica.runs[j].server)
        e = replink.exchange(p, r, guess_ns) if p is not None and r is not None else None
        if e is not None:
            found.append(e)
    if not found:
        return None
    met = found[0]
    for e in found[1:]:
        met = met.meet(e) or max((met, e), key=lambda x: x.pairs)
    return met


def _clock(primary: Document, replica: Document, pairs: list[tuple[int, int]]):
    """The replica's clock against the primary's (a recording.merge.Joined without its document yet): one
    host's one clock, else the replication exchange's estimate, else the hosts' realtime clocks."""
    from valkeytrace.recording.merge import Joined

    ph, rh = primary.host, replica.host
    pr, rr = ph.get("realtime_minus_monotonic_ns"), rh.get("realtime_minus_monotonic_ns")
    guess = int(pr) - int(rr) if pr is not None and rr is not None else 0
    est = _estimate(primary, replica, pairs, guess)
    rep = Joined({}, replica, "", pairs, guess, None, "the hosts' realtime clocks (no exchange to join: the windows "
                 "hold no sized socket events)")
    if bool(ph.get("boot_id")) and ph.get("boot_id") == rh.get("boot_id"):
        # one kernel, one CLOCK_MONOTONIC: the offset is 0; the exchange's estimate kept beside
        rep.offset_ns, rep.error_ns, rep.source = 0, 0, "one host (the same boot id)"
        rep.estimate = None if est is None else est.offset_ns
    elif est is not None:
        rep.offset_ns, rep.error_ns, rep.source = est.offset_ns, est.error_ns, "replication exchange"
    return rep


@click.command()
@click.argument("recordings", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The merged recording (.vtrace); an existing file is never replaced without --force.")
@click.option("--force", is_flag=True, help="Replace an existing -o recording.")
def merge(recordings, output, force):
    """Join the recordings of a primary and its replicas, each made where its node runs
    (record --attach PID), into one recording: nodes matched by replication id, each replica's
    clock aligned with the primary's from the replication exchange (the offset and its error kept
    in `nodes`). report and export read it like a record --replicas recording."""
    from valkeytrace.recording import merge as recmerge

    if len(recordings) < 2:
        raise VTUsageError("merge takes the recordings of a primary and at least one of its replicas")
    recfmt.check_recording_output(output, force, tuple(recordings))
    docs = [recfmt.read(p) for p in recordings]
    typed = [decode(d) for d in docs]
    names = [os.path.basename(p) for p in recordings]
    pi, ris = recmerge.match(typed, names)
    primary = typed[pi]
    reps, lines = [], []
    for ri in ris:
        d = typed[ri]
        pairs = recmerge.pair_windows(primary, d)
        if not pairs:
            raise VTUsageError(f"{names[ri]}: none of its windows overlaps one of {names[pi]}'s (were they recorded "
                               "at the same time?)")
        rep = _clock(primary, d, pairs)
        rep.doc, rep.name = docs[ri], names[ri]
        reps.append(rep)
        how = (f"one host: clock offset 0 (the exchange estimates {rep.estimate / 1e3:+.1f} µs)"
               if rep.estimate is not None else
               f"clock offset {rep.offset_ns / 1e3:+.1f} µs" + (f" ± {rep.error_ns / 1e3:.1f} µs" if rep.error_ns
                                                                 is not None else "") + f" ({rep.source})")
        lines.append(f"  replica {names[ri]} (pid {d.server.pid}, port {d.server.port}): "
                     f"{len(pairs)} window(s) paired; {how}")
    out = recmerge.build(docs[pi], names[pi], reps)
    recfmt.write(output, recfmt.validate(out, output))
    click.echo(f"wrote {output}: primary {names[pi]} (pid {primary.server.pid}, port "
               f"{primary.server.port}) and {len(reps)} replica(s)", err=True)
    for line in lines:
        click.echo(line, err=True)
