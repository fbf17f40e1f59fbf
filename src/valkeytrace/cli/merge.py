"""`valkeytrace merge A.vtrace B.vtrace ... -o system.vtrace`: one system from its nodes' recordings."""
from __future__ import annotations

import os

import click

from valkeytrace.errors import VTUsageError
from valkeytrace.recording import format as recfmt


def _estimate(primary: dict, replica: dict, pairs: list[tuple[int, int]], guess_ns: int):
    """The replica's clock offset from every paired window's replication exchange (their bounds met)."""
    from valkeytrace.analysis import replink

    found = []
    for i, j in pairs:
        p = replink.node_events(primary["runs"][i]["server"])
        r = replink.node_events(replica["runs"][j]["server"])
        e = replink.exchange(p, r, guess_ns) if p is not None and r is not None else None
        if e is not None:
            found.append(e)
    if not found:
        return None
    met = found[0]
    for e in found[1:]:
        met = met.meet(e) or max((met, e), key=lambda x: x.pairs)
    return met


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
    names = [os.path.basename(p) for p in recordings]
    pi, ris = recmerge.match(docs, names)
    primary = docs[pi]
    reps, lines = [], []
    for ri in ris:
        d = docs[ri]
        pairs = recmerge.pair_windows(primary, d)
        if not pairs:
            raise VTUsageError(f"{names[ri]}: none of its windows overlaps one of {names[pi]}'s (were they recorded "
                               "at the same time?)")
        ph, rh = primary.get("host") or {}, d.get("host") or {}
        guess = 0
        if ph.get("realtime_minus_monotonic_ns") is not None and rh.get("realtime_minus_monotonic_ns") is not None:
            guess = int(ph["realtime_minus_monotonic_ns"]) - int(rh["realtime_minus_monotonic_ns"])
        est = _estimate(primary, d, pairs, guess)
        one_host = bool(ph.get("boot_id")) and ph.get("boot_id") == rh.get("boot_id")
        rep: dict
        if one_host:  # one kernel, one CLOCK_MONOTONIC: the offset is 0; the exchange's estimate kept beside
            rep = dict(offset_ns=0, error_ns=0, source="one host (the same boot id)",
                       estimate=None if est is None else est.offset_ns)
        elif est is not None:
            rep = dict(offset_ns=est.offset_ns, error_ns=est.error_ns, source="replication exchange", estimate=None)
        else:
            rep = dict(offset_ns=guess, error_ns=None, source="the hosts' realtime clocks (no exchange to join: the "
                       "windows hold no sized socket events)", estimate=None)
        reps.append({"doc": d, "name": names[ri], "pairs": pairs, **rep})
        how = (f"one host: clock offset 0 (the exchange estimates {est.offset_ns / 1e3:+.1f} ± {est.error_ns / 1e3:.1f} µs)"
               if one_host and est is not None else
               f"clock offset {rep['offset_ns'] / 1e3:+.1f} µs" + (f" ± {rep['error_ns'] / 1e3:.1f} µs" if rep["error_ns"]
                                                                   is not None else "") + f" ({rep['source']})")
        lines.append(f"  replica {names[ri]} (pid {d['server'].get('pid')}, port {d['server'].get('port')}): "
                     f"{len(pairs)} window(s) paired; {how}")
    out = recmerge.build(primary, names[pi], reps)
    recfmt.write(output, recfmt.validate(out, output))
    click.echo(f"wrote {output}: primary {names[pi]} (pid {primary['server'].get('pid')}, port "
               f"{primary['server'].get('port')}) and {len(reps)} replica(s)", err=True)
    for line in lines:
        click.echo(line, err=True)
