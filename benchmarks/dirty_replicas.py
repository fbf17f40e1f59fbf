"""The question that holds #3381 back (2026-09-16): replicas that serve writes their primary has not made
durable, and what each proposed fix costs (docs/explain.md, "Replicas and dirty writes").

Records, one launch each, a primary under the durable virtual offload (every fdatasync +DELAY) with one
replica, write-only SETs from valkeytrace's own client (c=--write-clients, each value carrying its sequence)
and --readers GETs on the replica of the key the writers sent last, for each --offload-replicas way:
  immediate         the stream leaves at once (#3381 as reviewed)
  committed         only what is durable on the primary is sent (B)
  replica-blocking  the stream leaves at once, the replica holds reads of keys written past the committed
                    offset (A: the offset read from the primary's shared file)
with the replica's own fsync not delayed (a fast replica disk) and, with --slow-replica DELAY, delayed (a
slow one); each with --verify-durability (the primary killed after its window, its AOF reloaded: phantom reads).
Prints one markdown row per recording, then one JSON object (the rows' figures) as its last line.

    sudo .venv/bin/python benchmarks/dirty_replicas.py --slow-replica 4ms --out /tmp/dirty
    .venv/bin/python benchmarks/dirty_replicas.py --duration 1 --modes immediate,committed  (quick)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

VT = os.path.join(os.path.dirname(sys.executable), "valkeytrace")
MODES = ("immediate", "committed", "replica-blocking")
HEAD = ("replica-side", "writes on the replica before durable", "dirty reads", "phantom reads", "lag p50",
        "WAITAOF p50 / p99", "REPLICA_GET p50 / p99", "SET p50", "SET TPS")


def run(*args) -> str:
    res = subprocess.run([VT, *map(str, args)], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        sys.exit(f"valkeytrace {' '.join(map(str, args[:2]))} failed: {res.stderr.strip().splitlines()[-1:]}")
    return res.stdout


def ms(us) -> str:
    return "–" if us is None else f"{us:.0f} µs" if us < 1000 else f"{us / 1000:.2f} ms"


def row(name: str, path: str) -> tuple[list, dict]:
    rep = json.loads(run("report", path, "--format", "json"))["runs"][0]
    cell = next(c for c in rep["cells"] if c["workload"] == "write-only")
    r, ops, dc = cell["replication"], cell["ops"], rep.get("durability_check") or {}
    d = r["dirty"]
    fig = {"writes": d["writes"], "writes_seen_dirty": d["writes_seen_dirty"], "reads": d["reads"],
           "reads_dirty": d["reads_dirty"], "reads_checked": d.get("reads_checked"),
           "phantom_reads": dc.get("phantom_reads"), "lag_p50_us": r["lag_p50_us"],
           "waitaof_p50_us": r["waitaof_p50_us"], "waitaof_p99_us": r["waitaof_p99_us"],
           "replica_get_p50_us": ops["REPLICA_GET"]["p50_us"], "replica_get_p99_us": ops["REPLICA_GET"]["p99_us"],
           "set_p50_us": ops["SET"]["p50_us"], "set_tps": ops["SET"]["tps"], "acked_missing": dc.get("acked_missing")}
    share = f"{d['writes_seen_dirty'] / d['writes']:.0%} of {d['writes']:,}" if d["writes"] else "–"
    return [name, share, f"{d['reads_dirty']:,} of {d.get('reads_checked') or 0:,} checked",
            "–" if fig["phantom_reads"] is None else f"{fig['phantom_reads']:,}", ms(r["lag_p50_us"]),
            f"{ms(r['waitaof_p50_us'])} / {ms(r['waitaof_p99_us'])}", f"{ms(fig['replica_get_p50_us'])} / "
            f"{ms(fig['replica_get_p99_us'])}", ms(fig["set_p50_us"]), f"{fig['set_tps']:,.0f}/s"], fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", default="4ms", help="the primary's emulated fsync delay")
    ap.add_argument("--slow-replica", default=None, help="also each mode with the replica's fsync +this (e.g. 4ms)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--readers", type=int, default=10)
    ap.add_argument("--write-clients", type=int, default=50)
    ap.add_argument("--out", default=None, help="keep the recordings here (default: a temporary directory)")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="valkeytrace-dirty-")
    os.makedirs(out, exist_ok=True)
    disks = [("fast replica disk", "none")] + ([(f"slow replica disk (+{a.slow_replica})", a.slow_replica)]
                                                if a.slow_replica else [])
    rows, figs = [], {}
    for disk, delay in disks:
        for mode in a.modes.split(","):
            name = f"{mode}, {disk}"
            path = os.path.join(out, f"{mode}-{'fast' if delay == 'none' else 'slow'}.vtrace")
            run("record", "--replicas", "1", "--replica-get-clients", a.readers, "--replica-fsync-delay", delay,
                "--workload", "write-only", "--sizes", "64", "--duration", a.duration, "--repeat", a.repeat,
                "--io-threads", "1", "--write-clients", a.write_clients, "--appendfsync", "always",
                "--inject-fsync-delay", a.delay, "--emulate-offload", "durable", "--offload-replicas", mode,
                "--verify-durability", "--force", "-o", path)
            r, f = row(name, path)
            rows.append(r)
            figs[name] = f
    print(f"primary: appendfsync always, durable virtual offload, fsync +{a.delay}; {a.write_clients} SET clients, "
          f"{a.readers} replica readers; {a.duration:g} s x {a.repeat} windows each\n")
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "---|" * len(HEAD))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(json.dumps(figs))


if __name__ == "__main__":
    main()
