"""Tracing overhead at finer grain than benchmarks/overhead.py: one long GET c=50 run (SET c=8
behind it, appendfsync always, embedded server), the eBPF tracer toggled every --period seconds;
each interval's GET rate is the server's own count (INFO commandstats cmdstat_get calls) over
it. Each traced interval is compared with the mean of its two untraced neighbours, so drift
cancels and many short intervals average out the machine's noise (±9% per 2 s interval here;
40 cycles give about ±1.4%).

This is the tool that attributes cost to probe groups (--probes) and to other probe sets:
  --tracefs EVENT[,EVENT]  toggle plain tracefs events instead (e.g. syscalls/sys_enter_fdatasync:
                           the kernel's syscall slow path, no BPF at all)
  --control                toggle nothing (the harness's own bias; should be x1.00)

    .venv/bin/python benchmarks/overhead_intervals.py [--probes calls,sched,loop] [--cycles 40]

Prints one line: the median and mean traced/untraced ratio, n, and the per-interval spread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", help="eBPF probe groups (calls,sched,loop,flush,syscalls); default record's")
    ap.add_argument("--period", type=float, default=2.0)
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--appendfsync", default="always")
    ap.add_argument("--tracefs", help="toggle these tracefs events (no BPF) instead of the tracer")
    ap.add_argument("--control", action="store_true", help="toggle nothing")
    args = ap.parse_args()
    if args.probes:
        os.environ["VALKEYTRACE_PROBES"] = args.probes
    from valkeytrace import system
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.workload import scenarios
    from valkeytrace.workload.clients import find_client

    tracer = None if (args.tracefs or args.control) else EbpfTracer()
    tracefs = system.tracefs_dir()

    def toggle(on: bool):
        if tracer is not None:
            tracer.set_attached(on)
        elif args.tracefs:
            for ev in args.tracefs.split(","):
                with open(os.path.join(tracefs, "events", ev, "enable"), "w") as f:
                    f.write("1" if on else "0")

    client = find_client()
    srv = EmbeddedServer(appendfsync=args.appendfsync)
    rates: list[tuple[bool, float]] = []
    bg = fg = None
    try:
        if tracer is not None:
            tracer.start(srv)
        toggle(False)
        cell, size = scenarios.ReadHeavy(scenarios.bench_load(srv, client)), scenarios.BENCH_VALUE
        cell.prepare(size)
        bg, fg = cell.background(size), cell.foreground(size)
        conn = srv.client()

        def gets() -> int:
            return int(conn.info("commandstats")["cmdstat_get"]["calls"])

        time.sleep(2)
        for i in range(2 * args.cycles):
            on = i % 2 == 1
            toggle(on)
            time.sleep(0.2)  # settle
            c0, t0 = gets(), time.monotonic()
            time.sleep(args.period)
            c1, t1 = gets(), time.monotonic()
            rates.append((on, (c1 - c0) / (t1 - t0)))
    finally:
        for c in (fg, bg):
            if c is not None:
                c.stop()
        toggle(False)
        if tracer is not None:
            tracer.stop()
        srv.stop()
    ratios = [rates[i][1] / ((rates[i - 1][1] + rates[i + 1][1]) / 2)
              for i in range(1, len(rates) - 1) if rates[i][0]]
    what = "control" if args.control else f"tracefs {args.tracefs}" if args.tracefs else \
        f"ebpf {os.environ.get('VALKEYTRACE_PROBES', 'default')}"
    sd = statistics.stdev(ratios) if len(ratios) > 1 else float("nan")  # a single traced interval: no spread
    print(f"{what}: GET TPS traced/untraced median x{statistics.median(ratios):.3f} mean "
          f"x{statistics.fmean(ratios):.3f} (n={len(ratios)}, per-interval sd {sd:.3f}); "
          f"untraced ~{statistics.median(r for on, r in rates if not on):,.0f} GET/s")


if __name__ == "__main__":
    main()
