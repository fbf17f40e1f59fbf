"""How often `valkeytrace predict`'s 90% intervals hold, where nothing was tuned: a matrix of baselines
(appendfsync always) and candidates nobody recorded at prediction time, each recorded, predicted from
its baseline, then measured. Prints, per op and metric, the share of measured figures inside their
interval and the median width (hi - lo over the point), for the part the design was chosen on (check
27's configuration: +4 ms, 64 B, one I/O thread -> the durable offload, a 1 ms window, +6 ms) and for
the rest (held out), then one JSON line.

    .venv/bin/python benchmarks/predict_matrix.py [--duration 2] [--repeat 3] [--only N] [--keep DIR]
    .venv/bin/python benchmarks/predict_matrix.py --from DIR   # predict again from a kept run's recordings

Each row of MATRIX: a baseline's record arguments and its candidates (the predict arguments, the
candidate's own record arguments). Needs root (eBPF) and a quiet machine: ~25 s a recording at 2 s x 3.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VT = str(ROOT / ".venv" / "bin" / "valkeytrace")
SIZE_ARGS = ("--keyspace", "20000", "--appendfsync", "always", "--backend", "ebpf")
D = ["--emulate-offload", "durable"]

# (name, design?, baseline record args, [(candidate name, predict args, candidate record args)])
MATRIX = [
    ("4ms-64B", True, ["--inject-fsync-delay", "4ms", "--sizes", "64"], [
        ("durable", D, D), ("gather-1ms", D + ["--offload-gather", "1ms"], D + ["--offload-gather", "1ms"]),
        ("delay-6ms", ["--inject-fsync-delay", "6ms"], ["--inject-fsync-delay", "6ms"])]),
    ("2ms-1024B", False, ["--inject-fsync-delay", "2ms", "--sizes", "1024"], [
        ("durable", D, D), ("gather-3ms", D + ["--offload-gather", "3ms"], D + ["--offload-gather", "3ms"]),
        ("delay-8ms", ["--inject-fsync-delay", "8ms"], ["--inject-fsync-delay", "8ms"])]),
    ("1ms-64B-10wc", False, ["--inject-fsync-delay", "1ms", "--sizes", "64", "--write-clients", "10"], [
        ("gather-0.25ms", D + ["--offload-gather", "0.25ms"], D + ["--offload-gather", "0.25ms"]),
        ("100-writers", ["--write-clients", "100"], ["--write-clients", "100"])]),
    ("4ms-64B-io2", False, ["--inject-fsync-delay", "4ms", "--sizes", "64", "--io-threads", "2"], [
        ("durable", D, D), ("delay-2ms", ["--inject-fsync-delay", "2ms"], ["--inject-fsync-delay", "2ms"])]),
]
METRICS = ("p50_us", "p99_us", "tps")


def run(*args, timeout=600):
    res = subprocess.run([VT, *args], capture_output=True, text=True, timeout=timeout)
    if res.returncode:
        sys.exit(f"valkeytrace {args[0]} failed: {res.stderr.strip().splitlines()[-1:]}")


def record(path, base_args, extra, duration, repeat):
    args = list(base_args)
    for i in range(0, len(extra), 2):  # a candidate's option replaces the baseline's of the same name
        if extra[i] in args and not extra[i].startswith("--emulate") and not extra[i].startswith("--offload"):
            j = args.index(extra[i])
            args[j + 1] = extra[i + 1]
        else:
            args += extra[i:i + 2]
    io = [] if "--io-threads" in args else ["--io-threads", "1"]
    run("record", "--workload", "all", "--duration", str(duration), "--repeat", str(repeat), *SIZE_ARGS, *io, *args,
        "-o", str(path))


def figures(report, workload, op):
    cells = [c for c in report["runs"][0]["cells"] if c["workload"] == workload]
    return cells[0]["ops"][op] if cells and op in cells[0]["ops"] else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", type=int, help="the first N rows of the matrix (with the first candidate each)")
    ap.add_argument("--keep", help="keep the recordings and predictions in this directory")
    ap.add_argument("--from", dest="src", help="a --keep directory: predict again from its recordings, record nothing")
    a = ap.parse_args()
    work = Path(a.src or a.keep or tempfile.mkdtemp(prefix="vt-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = MATRIX[:a.only] if a.only else MATRIX
    judged = []
    try:
        for name, design, base_args, cands in rows:
            base = work / f"{name}.vtrace"
            if not a.src:
                record(base, base_args, [], a.duration, a.repeat)
            elif not base.exists():
                continue
            for cname, pargs, rargs in (cands[:1] if a.only else cands):
                pred_path, cand = work / f"{name}-{cname}.json", work / f"{name}-{cname}.vtrace"
                rep = work / f"{name}-{cname}-report.json"
                if a.src and not rep.exists():
                    continue
                pred_path.unlink(missing_ok=True)
                run("predict", str(base), "--format", "json", "-o", str(pred_path), *pargs)
                if not a.src:
                    record(cand, base_args, rargs, a.duration, a.repeat)
                    run("report", str(cand), "--format", "json", "-o", str(rep))
                pred, meas = json.loads(pred_path.read_text()), json.loads(rep.read_text())
                for workload, op in (("read-heavy", "GET"), ("write-only", "SET")):
                    got = next((c["ops"][op] for c in pred["cells"] if c["workload"] == workload), None)
                    want = figures(meas, workload, op)
                    if not got or not want:
                        continue
                    for k in METRICS:
                        lo, hi = got["interval"][k]
                        judged.append({"design": design, "case": f"{name} -> {cname}", "op": op, "metric": k,
                                       "predicted": got[k], "lo": lo, "hi": hi, "measured": want[k]})
                        j = judged[-1]
                        print(f"{j['case']:28s} {op} {k:7s} measured {want[k]:10.0f}  predicted {got[k]:10.0f} "
                              f"[{lo:.0f}, {hi:.0f}]{'' if lo <= want[k] <= hi else '  OUTSIDE'}", flush=True)
    finally:
        if not a.keep and not a.src:
            shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for part in ("design", "held_out"):
        js = [j for j in judged if j["design"] == (part == "design")]
        for op in ("GET", "SET"):
            for k in METRICS:
                xs = [j for j in js if j["op"] == op and j["metric"] == k]
                if not xs:
                    continue
                inside = sum(j["lo"] <= j["measured"] <= j["hi"] for j in xs)
                width = statistics.median((j["hi"] - j["lo"]) / j["predicted"] for j in xs)
                err = statistics.median(abs(j["predicted"] / j["measured"] - 1) for j in xs)
                summary[f"{part} {op} {k}"] = {"inside": inside, "n": len(xs), "median_width": round(width, 3),
                                               "median_abs_error": round(err, 3)}
                print(f"{part:8s} {op} {k:7s} inside {inside}/{len(xs)}  median width {width:.2f}  "
                      f"median |error| {err:.1%}")
    print(json.dumps({"figures": len(judged), "coverage": summary}))


if __name__ == "__main__":
    main()
