"""Where a compare's wall time goes: each launch's server start and probes, each run's preparation
(keyspace fill, the client's calibration, the background load settling), its measured window, what
follows the window (the GET-only demand pass, the run's end), and what is left to the compare
itself (launching, merging, the report), from the timestamps the recordings keep (runs[].started_at,
window_start, window_end, ended_at; server.probe.attach_ms and compile_ms) and this script's clock.

    .venv/bin/python benchmarks/walltime.py                 # the demo's compare (make demo's options)
    .venv/bin/python benchmarks/walltime.py --quick         # a 2 + 2 compare of one 64 B read-heavy cell
    .venv/bin/python benchmarks/walltime.py --from DIR      # the breakdown of a compare already in DIR

Prints one table: seconds per phase, summed over the launches of each side, and the compare's total.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VT = str(ROOT / ".venv" / "bin" / "valkeytrace")

DEMO = ["--launches", "3", "--repeat", "1", "--sizes", "64,256,1024", "--duration", "1.5", "--keyspace", "20000",
        "--io-threads", "1", "--inject-fsync-delay", "4ms", "--appendfsync", "always",
        "--candidate-emulate-offload", "durable", "--candidate-offload-gather", "auto",
        "--baseline-fsync-sensitivity", "2ms,4ms"]
QUICK = ["--launches", "2", "--repeat", "1", "--workload", "read-heavy", "--sizes", "64", "--duration", "1",
         "--keyspace", "20000", "--backend", "ebpf"]
PHASES = ("server start", "probes", "prepare", "window", "after window", "end of launch")


def breakdown(path: str) -> dict:
    """{phase: seconds} summed over the launches merged into one side's recording (its launches[].timing
    and runs' timestamps), with the probes' compile and attach figures."""
    from valkeytrace.recording import format as recfmt

    doc = recfmt.read(path)
    out: dict = {p: 0.0 for p in PHASES}
    out.update(launches=0, compile_s=0.0, attach_s=0.0, compiled=0)
    for launch in doc.get("launches") or [{"launch": None, "timing": doc.get("timing")}]:
        runs = sorted((r for r in doc["runs"] if r.get("launch") == launch["launch"] and r.get("started_at")),
                      key=lambda r: r["started_at"])
        t = launch.get("timing") or {}
        if not runs or not t.get("began"):
            continue
        out["launches"] += 1
        out["server start"] += t["server_ready"] - t["began"]
        out["probes"] += (t.get("tracer_ready") or t["server_ready"]) - t["server_ready"]
        prev = t.get("tracer_ready") or t["server_ready"]
        for r in runs:
            ws, we, end = r.get("window_start"), r.get("window_end"), r.get("ended_at") or r["started_at"]
            if ws and we:
                out["prepare"] += ws - prev
                out["window"] += we - ws
                out["after window"] += end - we
            else:
                out["prepare"] += end - prev
            prev = end
        out["end of launch"] += (t.get("ended") or prev) - prev
        p = next((x for r in runs if (x := (r.get("server") or {}).get("probe")) and "attach_ms" in x), None)
        if p:
            out["attach_s"] += (p.get("attach_ms") or 0) / 1e3
            out["compile_s"] += (p.get("compile_ms") or 0) / 1e3
            out["compiled"] += bool(p.get("compile_ms"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 2 + 2 compare of one 64 B read-heavy cell")
    ap.add_argument("--from", dest="src", help="a compare's directory already recorded")
    a = ap.parse_args()
    took = None
    if a.src:
        d = a.src
    else:
        d = tempfile.mkdtemp(prefix="vt-walltime-")
        argv = [VT, "compare", *(QUICK if a.quick else DEMO), "-o", os.path.join(d, "cmp")]
        t0 = time.monotonic()
        res = subprocess.run(argv, capture_output=True, text=True)
        took = time.monotonic() - t0
        if res.returncode != 0:
            print(f"compare failed ({res.returncode}): {res.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        d = os.path.join(d, "cmp")
    sides = {s: breakdown(os.path.join(d, f"{s}.vtrace")) for s in ("baseline", "candidate")}
    print(f"{'phase (s, summed over launches)':34} {'baseline':>10} {'candidate':>10} {'both':>10}")
    total = 0.0
    for p in PHASES:
        b, c = sides["baseline"][p], sides["candidate"][p]
        total += b + c
        print(f"{p:34} {b:10.1f} {c:10.1f} {b + c:10.1f}")
    for k, label in (("compile_s", "  of which probes compiling"), ("attach_s", "  probes ready (attach_ms)")):
        b, c = sides["baseline"][k], sides["candidate"][k]
        print(f"{label:34} {b:10.1f} {c:10.1f} {b + c:10.1f}")
    print(f"{'launches that compiled the probes':34} {sides['baseline']['compiled']:10d} "
          f"{sides['candidate']['compiled']:10d}")
    if took is not None:
        print(f"{'the compare, end to end':34} {'':10} {'':10} {took:10.1f}")
        print(f"{'  left to the compare itself':34} {'':10} {'':10} {took - total:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
