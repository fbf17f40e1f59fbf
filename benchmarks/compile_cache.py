"""What the compile cache saves a `record`: the tracer's program compiled by bcc in a child, against the same
program loaded from the cache (tracers/bpf_cache.py), alternating, each timed to the loaded program in hand.

    .venv/bin/python benchmarks/compile_cache.py [--rounds 5]

The program is the one an eBPF `record` of the embedded server compiles here (its plan, flags and raw
tracepoints); the cache is a directory of the script's own. Wall time and the CPU of this process and its
children (the compiler runs in a child). The last line is JSON: each side's median and the ratio of medians
with a 95% bootstrap interval.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time

import numpy as np


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def ratio_interval(a: list[float], b: list[float], draws: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of median(a) / median(b)."""
    rng = np.random.default_rng(1)
    x, y = np.asarray(a), np.asarray(b)
    r = [np.median(rng.choice(x, len(x))) / np.median(rng.choice(y, len(y))) for _ in range(draws)]
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from valkeytrace.server.binaries import embedded_server
    from valkeytrace.tracers import bcc_child, probe_source
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.tracers.ebpf_plan import MAIN_PROBE, cflags

    with tempfile.TemporaryDirectory() as d:
        os.environ["VALKEYTRACE_BPF_CACHE"] = d
        plan = EbpfTracer().plan(embedded_server(), d)
        text, flags = probe_source(MAIN_PROBE).encode(), cflags(**plan.defines())
        raw = list(EbpfTracer.REQUEST_PROBES.values())
        bcc_child.compile_program(text, flags, raw).cleanup()  # the cache filled
        wall: dict[str, list[float]] = {"compiler": [], "cache": []}
        cpu: dict[str, list[float]] = {"compiler": [], "cache": []}
        for _ in range(args.rounds):
            for how in ("compiler", "cache"):
                t, c = time.perf_counter(), _cpu()
                program = bcc_child.compile_program(text, flags, raw, cache=how == "cache")
                wall[how].append(1000 * (time.perf_counter() - t))
                cpu[how].append(1000 * (_cpu() - c))
                assert program.program_from == how, (how, program.program_from)
                program.cleanup()
    print(f"{'program in hand':18} {'wall ms (median)':>17} {'CPU ms (median)':>16}   rounds: {args.rounds}")
    for how in wall:
        print(f"{how:18} {statistics.median(wall[how]):17.1f} {statistics.median(cpu[how]):16.1f}")
    lo, hi = ratio_interval(wall["cache"], wall["compiler"])
    ratio = statistics.median(wall["cache"]) / statistics.median(wall["compiler"])
    print(f"cache / compiler, wall: x{ratio:.3f} [{lo:.3f}, {hi:.3f}]")
    print(json.dumps({"rounds": args.rounds, "compiler_wall_ms": round(statistics.median(wall["compiler"]), 1),
                      "cache_wall_ms": round(statistics.median(wall["cache"]), 1),
                      "compiler_cpu_ms": round(statistics.median(cpu["compiler"]), 1),
                      "cache_cpu_ms": round(statistics.median(cpu["cache"]), 1),
                      "wall_ratio": round(ratio, 4), "wall_ratio_interval": [round(lo, 4), round(hi, 4)]}))


if __name__ == "__main__":
    main()
