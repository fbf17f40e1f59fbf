"""The open-loop client's own cost (record --rate: csrc/vt_load.c in a process of its own): its CPU
per request sent and the share of a core it takes, at the rates asked for, against a real embedded
Valkey (appendfsync no: the server is not what is measured), rounds interleaved across the rates.

    .venv/bin/python benchmarks/openloop_client.py [--rates 10000,50000] [--seconds 5] [--rounds 5] [--connections 50|grow]
    .venv/bin/python benchmarks/openloop_client.py --quick     # 1 s windows, 2 rounds

Per rate: µs of CPU per request (user + system, the client process's own, over warm-up, window and
drain), the cores it used over its wall time, the achieved against the offered rate, and the late
sends; each the median of the rounds with their range. The client is pinned to one CPU, the server
to the other, as record places them on this two-CPU VM. The last line is JSON.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def one(port: int, rate: float, seconds: float, cpu: int, connections: str) -> dict:
    argv = [sys.executable, "-m", "valkeytrace.workload.openloop", "--port", str(port), "--op", "GET",
            "--rate", repr(rate), "--duration", repr(seconds), "--keyspace", "10000", "--value-size", "64"]
    argv += [] if connections == "grow" else ["--connections", connections]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, {cpu})
    out, _ = proc.communicate(timeout=seconds + 60)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"the open-loop client failed at {rate:g}/s")
    res = json.loads(out.strip().splitlines()[-1])
    # the process's whole CPU (the interpreter's start included) and the C loop's own, apart
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"us_per_request": res["cpu_s"] * 1e6 / max(res["sent"], 1), "process_cpu_s": cpu_s,
            "cores": res["cpu_s"] / max(wall, 1e-9), "achieved": res["answered_drained"] / res["window_s"],
            "offered": res["due"] / res["window_s"], "late": res["late"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10000,50000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 s windows, 2 rounds")
    ap.add_argument("--connections", default="50",
                    help="a fixed pool of N, one request in flight each (record's default: --get-clients 50), or grow")
    a = ap.parse_args()
    if a.quick:
        a.seconds, a.rounds = 1.0, 2
    rates = [float(x) for x in a.rates.split(",")]
    from valkeytrace.server.process import EmbeddedServer

    ncpu = os.cpu_count() or 1
    server = EmbeddedServer(appendfsync="no", io_threads=1)
    try:
        os.sched_setaffinity(server.pid, {0})
        results: dict = {r: [] for r in rates}
        for _ in range(a.rounds):
            for rate in rates:
                results[rate].append(one(server.port, rate, a.seconds, 1 % ncpu, a.connections))
    finally:
        server.stop()
    summary = {}
    for rate, rows in results.items():
        s = {}
        for k in ("us_per_request", "cores", "achieved", "late"):
            vals = [r[k] for r in rows]
            s[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        summary[f"{rate:g}"] = s
        print(f"{rate:>8,.0f}/s: {s['us_per_request']['median']:.1f} µs CPU/request "
              f"({s['us_per_request']['min']:.1f}-{s['us_per_request']['max']:.1f}), "
              f"{s['cores']['median']:.2f} of a core over its run ({s['cores']['min']:.2f}-{s['cores']['max']:.2f}), "
              f"achieved {s['achieved']['median']:,.0f}/s, late {s['late']['median']:.0f}")
    print(json.dumps({"rounds": a.rounds, "seconds": a.seconds, "connections": a.connections, "rates": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
