"""How fast each CPU runs the same fixed loop, sample after sample (valkeytrace.cpuspeed): the
milliseconds of thread CPU time each sample took, in order, then the fastest and slowest tenths
and their ratio. On this project's VM the slow samples took 1.5-1.9x the fast ones, on either CPU,
in runs lasting seconds, with no steal reported (docs/performance.md).

    .venv/bin/python benchmarks/host_speed.py [--samples 40] [--loops 300000] [--gap 0.2]

The last line is one JSON object: {"cpus": [{"cpu", "n", "fast_ms", "slow_ms", "ratio", "slow_share"}]}.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os

from valkeytrace import cpuspeed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--loops", type=int, default=300_000, help="iterations of the loop per sample")
    ap.add_argument("--gap", type=float, default=0.2, help="seconds between samples")
    args = ap.parse_args()
    if args.samples < 1 or args.loops < 1 or args.gap < 0:
        ap.error("--samples and --loops must be positive, --gap not negative")
    out = []
    for cpu in sorted(os.sched_getaffinity(0)):
        ms = cpuspeed.samples(cpu, args.samples, args.loops, args.gap)
        sp = cpuspeed.spread(cpu, ms)
        print(f"CPU {cpu}: " + " ".join(f"{x:.1f}" for x in ms))
        print(f"  fastest tenth {sp.fast_ms:.1f} ms, slowest tenth {sp.slow_ms:.1f} ms: x{sp.ratio:.2f}; "
              f"{sp.slow_share:.0%} of samples over x{cpuspeed.SLOW} the fastest")
        out.append({k: round(v, 3) if isinstance(v, float) else v for k, v in dataclasses.asdict(sp).items()})
    print(json.dumps({"cpus": out}))


if __name__ == "__main__":
    main()
