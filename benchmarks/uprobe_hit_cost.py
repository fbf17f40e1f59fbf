"""What one uprobe hit costs inside a loaded valkey-server, measured by the server itself.

valkey 9's main thread spins (~1M event-loop iterations a second with I/O threads), calling
beforeSleep once per iteration; INFO stats eventloop_cycles / eventloop_duration_sum give the
iteration rate and mean duration. A bare uprobe (empty program) on beforeSleep is attached for
1 s, per task (pid = the server) and for every process (pid = -1), between detached seconds,
under the read-heavy load (GET c=50, SET c=8, appendfsync always). The difference in mean
iteration time is the cost of one hit, in situ (caches, other threads and all).

    .venv/bin/python benchmarks/uprobe_hit_cost.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--offsets", default="",
                    help="comma-separated byte offsets into the symbol (hex ok) to probe per task "
                         "instead of the per task / every process comparison at its entry, e.g. "
                         "0,0x1,0x11: which instructions the kernel emulates and which it single-steps")
    args = ap.parse_args()
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers.bcc_load import import_bcc
    from valkeytrace.tracers.ebpf_plan import LOOP_SYMBOL
    from valkeytrace.workload import scenarios
    from valkeytrace.workload.clients import find_client

    bpf = import_bcc().BPF(text="int hit(void *ctx) { return 0; }")
    client = find_client()
    srv = EmbeddedServer(appendfsync="always")
    binary = os.path.realpath(f"/proc/{srv.pid}/exe").encode()
    loads = []
    if args.offsets:
        probes = [(f"+{int(o, 0):#x}", int(o, 0), srv.pid) for o in args.offsets.split(",")]
    else:
        probes = [("per task", 0, srv.pid), ("every process", 0, -1)]
    per_iter: dict[str, list[float]] = {"detached": [], **{name: [] for name, _, _ in probes}}
    try:
        cell, size = scenarios.ReadHeavy(scenarios.bench_load(srv, client)), scenarios.BENCH_VALUE
        cell.prepare(size)
        loads += [cell.background(size), cell.foreground(size)]
        conn = srv.client()

        def loop_stats():
            st = conn.info("stats")
            return int(st["eventloop_cycles"]), int(st["eventloop_duration_sum"])

        time.sleep(2)
        for _ in range(args.rounds):
            for mode, off, pid in [p for probe in probes for p in (("detached", 0, None), probe)]:
                if pid is not None:
                    bpf.attach_uprobe(name=binary, sym=LOOP_SYMBOL.encode(), sym_off=off, fn_name=b"hit", pid=pid)
                time.sleep(0.2)
                c0, d0 = loop_stats()
                time.sleep(1.0)
                c1, d1 = loop_stats()
                if pid is not None:
                    bpf.detach_uprobe(name=binary, sym=LOOP_SYMBOL.encode(), sym_off=off, pid=pid)
                per_iter[mode].append((d1 - d0) / max(1, c1 - c0))
    finally:
        for load in loads:
            load.stop()
        srv.stop()
        bpf.cleanup()
    base = statistics.median(per_iter["detached"])
    for mode, _, _ in probes:
        med = statistics.median(per_iter[mode])
        print(f"uprobe on {LOOP_SYMBOL}, {mode}: {med:.2f} µs per iteration against {base:.2f} detached: "
              f"~{med - base:.1f} µs per hit (rounds: {', '.join(f'{v:.2f}' for v in per_iter[mode])})")


if __name__ == "__main__":
    main()
