"""Tracing overhead, measured side by side: interleaved A/B pairs of one cell (read-heavy, 64 B,
appendfsync always, embedded server), untraced against the eBPF backend, and untraced against the
shim. Within a pair the order is balanced (A = untraced, B = traced) so drift cancels.

Two ways to pair (the default is the precise one):
  same server (default): one embedded server per backend, the SET c=8 background load running
      throughout. Untraced = the eBPF probes detached (programs stay loaded) / the shim paused;
      traced = attached / recording. Launch-to-launch variance (+-10% here) does not enter the
      ratio. Each pair gives each side --duration seconds of GET c=50 in --slice second client
      runs (a fixed request count, calibrated once, full client report), in ABBA order (A B B A
      A B B A ...): linear drift cancels within every ABBA, and short-term noise (+-9% per 2 s
      here) averages over the slices. A side's GET TPS and p99 are the means over its slices.
      With one 4 s run per side, a 5-pair median still moved +-4% between identical runs here;
      with 16 s a side, the 5-pair median of the same code read x0.947-x1.030 in three runs
      (per-pair sd ~2.5-3% for GET TPS, 6-8% for p99). 40 s a side (the default) narrows that by
      about 1.6 (~17 min for both backends); with 24 s, two acceptance runs of the same code read
      x0.977/x0.967 and p99 x1.087/x1.024 against x0.986 and x1.014 over 15 pairs.
      Both sides get the same window bookkeeping (map, /proc and INFO reads at the slice edges):
      with it on the traced side only, the control (--probes none: the eBPF tracer loaded,
      nothing attached) read x1.030; with it on both, x0.989 and x1.009 (docs/performance.md).
      --slices FILE appends every slice (order, GET TPS, p99, SET TPS) as JSON lines, for
      looking at the noise itself.
  --separate-launches: each pass is a whole `valkeytrace record --backend none|ebpf|shim` run
      on a fresh server (includes the LD_PRELOAD itself and probe attachment; noisier).

  --backends none: an A/A control on the same harness (no tracer on either side): its ratios
      are the harness's own noise. --io-threads N and --aof-dir DIR change the cell, to look at
      where that noise comes from (benchmarks/slice_noise.py reads the --slices dumps).

    .venv/bin/python benchmarks/overhead.py [--pairs 5] [--duration 40] [--backends ebpf,shim]

Prints each pair's ratios (traced / untraced) and the medians of GET TPS, GET p99 and SET TPS;
the last line is one JSON object: ebpf_get_tps_ratio, ebpf_p99_ratio, shim_get_tps_ratio,
shim_p99_ratio (medians over the pairs), lost_events (summed over every traced pass), plus the
eBPF probes' attach time and the tracer's peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

VT = str(Path(sys.executable).with_name("valkeytrace"))


def one_pass(backend: str, duration: float, workdir: str, n: int) -> dict:
    out = os.path.join(workdir, f"{backend}-{n}.vtrace")
    from valkeytrace.workload.scenarios import BENCH_KEYSPACE, BENCH_VALUE

    cmd = [VT, "record", "--workload", "read-heavy", "--sizes", str(BENCH_VALUE), "--repeat", "1", "--duration",
           str(duration), "--keyspace", str(BENCH_KEYSPACE), "--appendfsync", "always", "--backend", backend, "-o", out]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{backend} pass failed: {res.stderr.strip().splitlines()[-1] if res.stderr else res.returncode}")
    rep = json.loads(subprocess.run([VT, "report", out, "--format", "json"], capture_output=True, text=True,
                                    check=True).stdout)
    cell = rep["runs"][0]["cells"][0]
    from valkeytrace.recording import format as recfmt

    doc = recfmt.read(out)
    raw = doc["runs"][0].get("server") or {}
    rss_kb = (doc.get("tracer") or {}).get("peak_rss_kb")
    return {"get_tps": cell["ops"]["GET"]["tps"], "get_p99_us": cell["ops"]["GET"]["p99_us"],
            "set_tps": cell["ops"]["SET"]["tps"], "lost": (cell.get("server") or {}).get("lost_events", 0),
            "attach_ms": (raw.get("probe") or {}).get("attach_ms"), "rss_mb": rss_kb / 1024 if rss_kb else None}


def slice_order(traced_first: bool, slices_per_side: int) -> list[bool]:
    """ABBA ABBA ...: each side gets slices_per_side slices (traced = True)."""
    order = []
    for k in range(slices_per_side):
        a = traced_first if k % 2 == 0 else not traced_first
        order += [a, not a]
    return order


def same_server_pairs(backend: str, pairs: int, duration: float, slice_s: float,
                      slices_file: str | None = None, socket_writes: bool = False, io_threads: int | None = None,
                      aof_dir: str | None = None) -> tuple[list, dict]:
    """[(untraced, traced) results] on one server, toggling the tracer between slices."""
    import time

    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers.shim import ShimTracer
    from valkeytrace.workload import scenarios
    from valkeytrace.workload.benchmark import parse_report
    from valkeytrace.workload.clients import find_client

    if backend == "none":  # A/A: both sides untraced, so the ratios are the harness's own noise
        from valkeytrace.tracers.null import NullTracer

        tracer, toggle = NullTracer(), lambda on: None
    elif backend == "shim":
        tracer = ShimTracer(socket_writes=socket_writes)
        toggle = lambda on: tracer.region.set_paused(not on)  # noqa: E731
    else:
        from valkeytrace.tracers.ebpf import EbpfTracer

        tracer = EbpfTracer()
        toggle = tracer.set_attached
    client = find_client()
    srv = EmbeddedServer(appendfsync="always", io_threads=io_threads, server_config={"dir": aof_dir} if aof_dir else None,
                         env={**os.environ, **tracer.launch_env()})
    info = {}
    out = []
    try:
        t0 = time.monotonic()
        tracer.start(srv)
        info["attach_ms"] = round((time.monotonic() - t0) * 1000, 1)
        cell, size = scenarios.ReadHeavy(scenarios.bench_load(srv, client)), scenarios.BENCH_VALUE
        cell.prepare(size)
        bg = cell.background(size)
        try:
            toggle(False)
            requests = int(cell.calibrate(size) * slice_s)
            per_side = max(1, round(duration / slice_s))
            for i in range(pairs):
                run = []  # the slices in the order they ran
                order = slice_order(i % 2 == 1, per_side)
                for traced in order:
                    toggle(traced)
                    time.sleep(0.2)  # settle
                    # the same bookkeeping on both sides: window edges read maps, /proc and INFO
                    tracer.window_begin()
                    proc = cell.foreground(size, requests)
                    try:
                        proc.wait(timeout=slice_s * 4 + 30)
                    finally:
                        proc.stop()
                    rep = parse_report(proc.output)
                    t0, t1 = proc.started_mono, time.monotonic()
                    window = tracer.window_end()
                    lost = (window or {}).get("lost_events", 0) if traced else 0
                    # the SET c=8 load's rate over the slice, from its progress lines (4 a second)
                    sets = [rec.rps for t, rec in list(bg.progress) if t0 < t <= t1 and rec.rps == rec.rps]
                    run.append({"traced": traced, "get_tps": rep.tps, "get_p99_us": rep.latency_ms.p99 * 1000,
                                "set_tps": statistics.fmean(sets) if sets else None, "lost": lost})
                slices = {side: [s for s in run if s["traced"] == side] for side in (False, True)}
                abba = "".join("B" if t else "A" for t in order)
                res = {side: {"get_tps": statistics.fmean(s["get_tps"] for s in got),
                              "get_p99_us": statistics.fmean(s["get_p99_us"] for s in got),
                              "set_tps": statistics.fmean(s["set_tps"] for s in got) if all(s["set_tps"] for s in got) else None,
                              "lost": sum(s["lost"] for s in got)} for side, got in slices.items()}
                out.append((res[False], res[True], abba))
                if slices_file:
                    with open(slices_file, "a") as f:
                        f.write(json.dumps({"backend": backend, "pair": i, "order": abba, "slices": run}) + "\n")
        finally:
            bg.stop()
        from valkeytrace.system import peak_rss_kb

        info["rss_mb"] = peak_rss_kb() / 1024
    finally:
        tracer.stop()
        srv.stop()
    return out, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=40.0,
                    help="seconds of GET load per side per pair (a whole record run each with --separate-launches)")
    ap.add_argument("--slice", type=float, default=2.0, help="seconds per client run within a pair (same server)")
    ap.add_argument("--backends", default="ebpf,shim",
                    help="ebpf, shim, and none (A/A: no tracer on either side, the harness's own noise)")
    ap.add_argument("--io-threads", type=int, help="the server's io-threads (same server) [default: record's, min(8, CPUs)]")
    ap.add_argument("--aof-dir", help="put the server's AOF in this directory (same server), e.g. an ext4 on a ramdisk")
    ap.add_argument("--probes", help="eBPF probe groups to load (calls,fs,sched,loop,flush,syscalls); default: record's own "
                         "(calls,fs,sched)")
    ap.add_argument("--separate-launches", action="store_true",
                    help="pair whole record runs on fresh servers instead of toggling one server's tracer")
    ap.add_argument("--socket-writes", action="store_true",
                    help="shim: also time every socket write, as record --socket-writes (same server)")
    ap.add_argument("--slices", metavar="FILE", help="append each pair's slices as JSON lines (same server)")
    args = ap.parse_args()
    if args.probes:
        os.environ["VALKEYTRACE_PROBES"] = args.probes
    workdir = tempfile.mkdtemp(prefix="vt-overhead-")
    summary: dict = {"pairs": args.pairs, "duration_s": args.duration, "slice_s": args.slice,
                     "method": "separate-launches" if args.separate_launches else "same-server"}
    # what the untraced side is: this harness toggles a loaded tracer; benchmarks/peers.py
    # measures against nothing loaded at all
    summary["untraced_side"] = ("a separate record --backend none run (no tracer)" if args.separate_launches else
                                {"ebpf": "the probes detached, the programs loaded, the poller running",
                                 "shim": "the shim preloaded and paused", "none": "no tracer (A/A)"})
    print(f"untraced side: {summary['untraced_side']} (benchmarks/peers.py: against nothing loaded)", flush=True)
    lost = 0
    for backend in args.backends.split(","):
        ratios = {"get_tps": [], "get_p99": [], "set_tps": []}
        attach, rss = [], []
        if args.separate_launches:
            def passes():
                for i in range(args.pairs):
                    order = ("none", backend) if i % 2 == 0 else (backend, "none")
                    res = {b: one_pass(b, args.duration, workdir, i) for b in order}
                    yield res["none"], res[backend], "/".join(order)
        else:
            def passes():
                results, info = same_server_pairs(backend, args.pairs, args.duration, args.slice, args.slices,
                                                  args.socket_writes, args.io_threads, args.aof_dir)
                attach.append(info["attach_ms"])
                rss.append(info["rss_mb"])
                yield from results
        for i, (base, traced, order) in enumerate(passes()):
            lost += traced["lost"] or 0
            if traced.get("attach_ms") is not None:
                attach.append(traced["attach_ms"])
            if traced.get("rss_mb"):
                rss.append(traced["rss_mb"])
            r = {"get_tps": traced["get_tps"] / base["get_tps"], "get_p99": traced["get_p99_us"] / base["get_p99_us"],
                 "set_tps": traced["set_tps"] / base["set_tps"] if base["set_tps"] and traced["set_tps"] else None}
            for k, v in r.items():
                if v is not None:
                    ratios[k].append(v)
            set_txt = f", SET TPS x{r['set_tps']:.3f}" if r["set_tps"] else ""
            print(f"{backend} pair {i + 1} ({order}): GET TPS {base['get_tps']:.0f} -> {traced['get_tps']:.0f} "
                  f"(x{r['get_tps']:.3f}), GET p99 {base['get_p99_us']:.0f} -> {traced['get_p99_us']:.0f} µs "
                  f"(x{r['get_p99']:.3f}){set_txt}, lost {traced['lost']}", flush=True)
        med = {k: statistics.median(v) if v else float("nan") for k, v in ratios.items()}
        print(f"{backend}: median GET TPS x{med['get_tps']:.3f}, GET p99 x{med['get_p99']:.3f} over {args.pairs} "
              f"pairs ({'separate launches' if args.separate_launches else 'same server'})", flush=True)
        summary[f"{backend}_get_tps_ratio"] = round(med["get_tps"], 4)
        summary[f"{backend}_p99_ratio"] = round(med["get_p99"], 4)
        if med["set_tps"] == med["set_tps"]:
            summary[f"{backend}_set_tps_ratio"] = round(med["set_tps"], 4)
        if attach:
            summary[f"{backend}_attach_ms_median"] = statistics.median(attach)
        if rss:
            summary[f"{backend}_tracer_rss_mb_max"] = round(max(rss), 1)
    summary["lost_events"] = lost
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
