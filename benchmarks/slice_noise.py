"""The noise in overhead.py's slices: how much a 2 s slice's GET TPS and p99 spread, how much of
that is slow drift, and what a pair's ratio and a 5-pair median are worth, under four estimators
of a pair's ratio. Reads the JSON lines of `overhead.py --slices FILE` (one or more files).

    .venv/bin/python benchmarks/slice_noise.py FILE [FILE ...] [--untraced-only]

--untraced-only: the spread of the untraced slices alone (what the machine does without tracing).
"""
import argparse
import json

import numpy as np

ESTIMATORS = ("means", "couples_geomean", "couples_median", "couples_trimmed")


def pair_ratio(slices: list, key: str, how: str) -> float:
    v = np.array([s[key] for s in slices], dtype=float)
    traced = np.array([s["traced"] for s in slices])
    if how == "means":  # what overhead.py reports
        return float(v[traced].mean() / v[~traced].mean())
    # adjacent couples (0,1), (2,3), ...: each holds one slice of each side in ABBA order
    logs = np.array([np.log(v[i] / v[i + 1]) if traced[i] else np.log(v[i + 1] / v[i])
                     for i in range(0, len(v) - 1, 2)])
    if how == "couples_geomean":
        return float(np.exp(logs.mean()))
    if how == "couples_median":
        return float(np.exp(np.median(logs)))
    k = len(logs) // 5
    return float(np.exp(np.sort(logs)[k:len(logs) - k].mean()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--untraced-only", action="store_true")
    args = ap.parse_args()
    pairs = [json.loads(line)["slices"] for f in args.files for line in open(f) if line.strip()]
    if not pairs:
        raise SystemExit("no slices in " + ", ".join(args.files))
    out = {"pairs": len(pairs)}
    for key, name in (("get_tps", "GET TPS"), ("get_p99_us", "GET p99")):
        per_pair = [np.array([s[key] for s in p if not (args.untraced_only and s["traced"])], dtype=float) for p in pairs]
        rel = np.concatenate([v / v.mean() for v in per_pair])
        lag1 = float(np.mean([np.corrcoef(v[:-1], v[1:])[0, 1] for v in per_pair if len(v) > 2]))
        print(f"{name}: {len(rel)} slices, CV {rel.std():.1%}, lag-1 autocorrelation {lag1:.2f} (within pairs)")
        out[key] = {"slices": len(rel), "cv": round(float(rel.std()), 4), "lag1": round(lag1, 3)}
        if args.untraced_only:
            continue
        rng = np.random.default_rng(0)
        for how in ESTIMATORS:
            r = np.array([pair_ratio(p, key, how) for p in pairs])
            med5 = np.std([np.median(rng.choice(r, 5)) for _ in range(4000)])
            print(f"  {how:16s} pair ratio median x{np.median(r):.4f}, pair sd {r.std():.1%}, "
                  f"5-pair median sd {med5:.1%} (bootstrap)")
            out[key][how] = {"median": round(float(np.median(r)), 4), "pair_sd": round(float(r.std()), 4),
                             "median5_sd": round(float(med5), 4)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
