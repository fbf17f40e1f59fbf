"""The answer to #3381's review (2026-05-25): what each side holds in memory when the disk stalls while
writes keep coming (docs/explain.md, "A disk that stalls").

Records, one launch each, open-loop SETs at --rate over a pool that grows (--connections grow), every
fdatasync +2 ms and one --stall in every --period (--inject-fsync-delay 2ms,stall:S/P), --duration s:
  always             appendfsync always, the fsync on the main thread
  everysec           appendfsync everysec (the bio fsync stalls; valkey postpones its write up to 2 s)
  offload            the durable virtual offload, no bound
  offload-pause      ... --offload-max-pending N --offload-overflow pause
  offload-reject     ... --offload-max-pending N --offload-overflow reject
each with --verify-durability (the server killed after its window, its AOF reloaded, every acknowledged
SET looked up); with --long-stall S2, also everysec under a stall longer than its 2 s wait (the 2 s rule:
INFO aof_delayed_fsync). Then prints `report --overload` of them all (markdown) and the model's prediction
of the offload's held replies from the always recording (predict --emulate-offload durable).

    sudo .venv/bin/python benchmarks/overload.py --out /tmp/overload
    .venv/bin/python benchmarks/overload.py --rate 4000 --duration 1.5 --stall 0.3s --period 1s  (quick)

The last line is one JSON object: each side's held replies peak, AOF buffer peak, RSS growth, rejected,
acked lost, and the model's held-replies peak.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

VT = os.path.join(os.path.dirname(sys.executable), "valkeytrace")
SIDES = {"always": [], "everysec": ["--appendfsync", "everysec"], "offload": ["--emulate-offload", "durable"],
         "offload-pause": ["--emulate-offload", "durable", "--offload-overflow", "pause"],
         "offload-reject": ["--emulate-offload", "durable", "--offload-overflow", "reject"]}


def run(*args) -> str:
    res = subprocess.run([VT, *map(str, args)], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        sys.exit(f"valkeytrace {' '.join(map(str, args[:2]))} failed: {res.stderr.strip().splitlines()[-1:]}")
    return res.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=20000)
    ap.add_argument("--stall", default="1s")
    ap.add_argument("--period", default="2.5s")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--max-pending", type=int, default=4000)
    ap.add_argument("--keyspace", type=int, default=20000)
    ap.add_argument("--long-stall", default=None, help="also everysec under this stall (e.g. 3s), every --long-period")
    ap.add_argument("--long-period", default="5s")
    ap.add_argument("--out", default=None, help="keep the recordings here (default: a temporary directory)")
    ap.add_argument("--sides", default=",".join(SIDES), help=f"which of {', '.join(SIDES)} (the first is the model's "
                    "baseline: always, for the model's figure)")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="valkeytrace-overload-")
    os.makedirs(out, exist_ok=True)
    common = ["--workload", "write-only", "--sizes", "64", "--duration", a.duration, "--repeat", "1", "--io-threads",
              "1", "--keyspace", a.keyspace, "--rate", a.rate, "--connections", "grow", "--verify-durability",
              "--force"]
    paths = []
    sides = {name: SIDES[name] for name in a.sides.split(",") if name in SIDES}
    if not sides:
        sys.exit(f"--sides {a.sides}: none of {', '.join(SIDES)}")
    if a.long_stall:
        sides["everysec-long-stall"] = ["--appendfsync", "everysec"]
    for name, extra in sides.items():
        stall = f"{a.long_stall}/{a.long_period}" if name.endswith("long-stall") else f"{a.stall}/{a.period}"
        bound = ["--offload-max-pending", a.max_pending] if "--offload-overflow" in extra else []
        path = os.path.join(out, f"{name}.vtrace")
        run("record", *common, "--inject-fsync-delay", f"2ms,stall:{stall}", "--label", name, *extra, *bound,
            "-o", path)
        paths.append(path)
    print(run("report", "--overload", *paths, "--format", "markdown"))
    pred = json.loads(run("predict", paths[0], "--emulate-offload", "durable", "--format", "json"))
    held = next((c.get("memory", {}).get("held_replies_peak") for c in pred["cells"] if c["workload"] == "write-only"), None)
    table = json.loads(run("report", "--overload", *paths, "--format", "json"))["rows"]
    print(f"model (predict {os.path.basename(paths[0])} --emulate-offload durable): held replies peak {held}")
    print(json.dumps({"recordings": out, "model_held_replies_peak": held,
                      **{r["label"]: {k: r[k] for k in ("held_replies_peak", "aof_buffer_bytes_peak", "rss_kb_growth",
                                                       "rejected", "acked_lost", "aof_delayed_fsync")} for r in table}}))


if __name__ == "__main__":
    main()
