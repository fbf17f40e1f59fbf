"""The launches' significance rule, measured: how often `valkeytrace compare` calls an A/A pair
significant (false positives) and how often it finds a small known change (detection), at given
settings. Each trial is one real `compare` (fresh launches of the embedded server, ABBA).

Conditions (--conditions, comma separated):
  aa          both sides the same (always + the base delay): any "significant" is a false positive
  fsync+0.5ms the candidate's fsync delay 0.5 ms longer
  fsync+1ms   the candidate's fsync delay 1 ms longer
  everysec-aa everysec on both sides (the fast path: a p50 of a few hundred µs)

    .venv/bin/python benchmarks/compare_rule.py --trials 10 --launches 4
    .venv/bin/python benchmarks/compare_rule.py --trials 2 --conditions aa,fsync+1ms   # a quick look

Prints a line per trial (GET p50 change, its interval, significant) and, per condition, the rate
of significant verdicts with a 95% Wilson interval; the last line is one JSON object. Run it
alone on the machine: it is timing-sensitive. Needs root for --backend ebpf (the default: the
tracer that runs in the suite); --backend none measures the rule without a tracer.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VT = str(Path(sys.executable).with_name("valkeytrace"))


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 3), round(min(1.0, c + h), 3)]


def trial(condition: str, args, workdir: Path) -> dict:
    base = ["--appendfsync", "everysec"] if condition.startswith("everysec") else \
        ["--appendfsync", "always", "--inject-fsync-delay", args.delay]
    extra = []
    if condition.startswith("fsync+"):
        add = float(condition.removeprefix("fsync+").removesuffix("ms"))
        extra = ["--candidate-inject-fsync-delay", f"{float(args.delay.removesuffix('ms')) + add:g}ms"]
    out = workdir / f"{condition}-{time.monotonic_ns()}"
    cmd = [VT, "compare", "--launches", str(args.launches), "--workload", "read-heavy", "--sizes", "64",
           "--duration", str(args.duration), "--repeat", "1", "--io-threads", "1", "--backend", args.backend,
           *base, *extra, "--no-whatif", "-o", str(out)]  # the rule's verdict: no what-if read
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    took = time.monotonic() - t0
    if res.returncode != 0:
        return {"condition": condition, "error": (res.stderr.strip().splitlines() or ["?"])[-1], "seconds": took}
    rep = subprocess.run([VT, "report", "--compare", str(out / "baseline.vtrace"), str(out / "candidate.vtrace"), "--no-whatif",
                          "--format", "json"], capture_output=True, text=True)
    verdicts = json.loads(rep.stdout)["compare"]["verdict"]
    got = {v["metric"]: v for v in verdicts if v["op"] == "GET"}
    return {"condition": condition, "seconds": round(took, 1),
            **{m: {"change_pct": got[m]["change_pct"], "interval_pct": got[m]["interval_pct"],
                   "significant": got[m]["significant"]} for m in ("p50_us", "tps") if m in got}}


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--delay", default="4ms")
    ap.add_argument("--backend", default="ebpf")
    ap.add_argument("--conditions", default="aa,fsync+0.5ms,fsync+1ms,everysec-aa")
    args = ap.parse_args()
    conditions = args.conditions.split(",")
    results = {c: [] for c in conditions}
    with tempfile.TemporaryDirectory(prefix="vt-rule-") as d:
        for i in range(args.trials):
            for c in conditions:  # interleaved: drift spreads over every condition
                r = trial(c, args, Path(d))
                results[c].append(r)
                if "error" in r:
                    print(f"{c} #{i + 1}: failed: {r['error']}", flush=True)
                    continue
                p, t = r["p50_us"], r["tps"]
                # fewer than 3 launches a side: no launch interval, the repeats' rule decides (change None)
                iv = p["interval_pct"]
                print(f"{c} #{i + 1}: GET p50 {_pct(p['change_pct'])} "
                      f"{f'[{iv[0]:+.1f}, {iv[1]:+.1f}]' if iv else '(no launch interval)'} "
                      f"{'significant' if p['significant'] else 'not significant'}; "
                      f"TPS {_pct(t['change_pct'])} {'sig' if t['significant'] else 'n.s.'} "
                      f"({r['seconds']:.0f} s)", flush=True)
    summary = {"launches": args.launches, "duration_s": args.duration, "delay": args.delay, "backend": args.backend}
    for c, rs in results.items():
        ok = [r for r in rs if "error" not in r]
        for m in ("p50_us", "tps"):
            k = sum(1 for r in ok if r.get(m, {}).get("significant"))
            summary[f"{c}_{m}_significant"] = [k, len(ok)]
            summary[f"{c}_{m}_rate_ci95"] = wilson(k, len(ok))
            print(f"{c}: {m} significant in {k} of {len(ok)} (95% interval of the rate {wilson(k, len(ok))})")
        if ok:
            summary[f"{c}_seconds_per_compare"] = round(sum(r["seconds"] for r in ok) / len(ok), 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
