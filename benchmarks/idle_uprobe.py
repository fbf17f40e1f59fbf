"""Does a uprobe that is attached but never hit cost the traced server anything?

One embedded server (appendfsync always) under the read-heavy load (GET c=50, SET c=8 behind it);
a bare uprobe (empty program) on SYMBOL in BINARY (default: the server's never-called
debugCommand) is attached and detached in ABBA order; each state's GET rate is the server's own
cmdstat_get count over 1.5 s slices. Prints the attached/detached ratio.

    /usr/bin/python3 must import bcc; run with the venv's python (system site packages):
    .venv/bin/python benchmarks/idle_uprobe.py [--symbol debugCommand] [--binary PATH] [--cycles 15]
    .venv/bin/python benchmarks/idle_uprobe.py --binary /lib/x86_64-linux-gnu/libc.so.6 --symbol getpwnam
    .venv/bin/python benchmarks/idle_uprobe.py --control      # toggles nothing
    .venv/bin/python benchmarks/idle_uprobe.py --all-processes # pid=-1: no per-task perf context
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--symbol", default="debugCommand")
    ap.add_argument("--binary", help="default: the embedded valkey-server")
    ap.add_argument("--cycles", type=int, default=15)
    ap.add_argument("--control", action="store_true")
    ap.add_argument("--all-processes", action="store_true")
    args = ap.parse_args()
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers.bcc_load import import_bcc
    from valkeytrace.workload import scenarios
    from valkeytrace.workload.clients import find_client

    bpf = import_bcc().BPF(text="int hit(void *ctx) { return 0; }")
    client = find_client()
    srv = EmbeddedServer(appendfsync="always")
    binary = (args.binary or os.path.realpath(f"/proc/{srv.pid}/exe")).encode()
    where = {"name": binary, "sym": args.symbol.encode(), "pid": -1 if args.all_processes else srv.pid}
    rates: dict[bool, list[float]] = {False: [], True: []}
    attached = False
    loads = []
    try:
        cell, size = scenarios.ReadHeavy(scenarios.bench_load(srv, client)), scenarios.BENCH_VALUE
        cell.prepare(size)
        loads += [cell.background(size), cell.foreground(size)]
        conn = srv.client()
        time.sleep(2)
        for k in range(args.cycles):
            for on in ((False, True, True, False) if k % 2 == 0 else (True, False, False, True)):
                if on != attached and not args.control:
                    if on:
                        bpf.attach_uprobe(fn_name=b"hit", **where)
                    else:
                        bpf.detach_uprobe(**where)
                attached = on
                time.sleep(0.3)
                c0, t0 = int(conn.info("commandstats")["cmdstat_get"]["calls"]), time.monotonic()
                time.sleep(1.5)
                c1, t1 = int(conn.info("commandstats")["cmdstat_get"]["calls"]), time.monotonic()
                rates[on].append((c1 - c0) / (t1 - t0))
    finally:
        for load in loads:
            load.stop()
        srv.stop()
        bpf.cleanup()
    ratio = statistics.fmean(rates[True]) / statistics.fmean(rates[False])
    what = "control" if args.control else f"{args.symbol} in {os.path.basename(binary.decode())}"
    print(f"{what}: attached/detached GET rate x{ratio:.3f} (n={len(rates[True])} slices a side, "
          f"{statistics.fmean(rates[False]):,.0f} GET/s detached)")


if __name__ == "__main__":
    main()
