"""What loading a recording costs: decompression + JSON parse (msgspec), then validation, each the median of
N loads with the spread (min-max), for the recordings given (a large one is made by repeating a
recording's runs xK when --grow K is given). Prints one line per file and stage.

    .venv/bin/python benchmarks/recording_load.py demo/cmp/baseline.vtrace --repeat 15
"""
import argparse
import copy
import json
import statistics
import time
import zlib

import msgspec

from valkeytrace.recording import format as recfmt
from valkeytrace.recording.schema import validate_document


def _stages(payload: bytes, n: int):
    parse, check = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        doc = msgspec.json.decode(zlib.decompress(payload))
        t1 = time.perf_counter()
        validate_document(doc, "bench")
        t2 = time.perf_counter()
        parse.append(t1 - t0)
        check.append(t2 - t1)
    return parse, check


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--grow", type=int, default=1, help="repeat the runs K times (a larger recording)")
    a = ap.parse_args()
    for p in a.paths:
        doc = recfmt.read(p)
        if a.grow > 1:
            doc["runs"] = [copy.deepcopy(r) for _ in range(a.grow) for r in doc["runs"]]
        payload = zlib.compress(json.dumps(doc).encode(), 1)
        parse, check = _stages(payload, a.repeat)
        ms = lambda xs: f"{statistics.median(xs) * 1e3:8.1f} ms [{min(xs) * 1e3:.1f}, {max(xs) * 1e3:.1f}]"  # noqa: E731
        print(f"{p} x{a.grow} ({len(payload) / 1e6:.1f} MB compressed, {len(doc['runs'])} runs): "
              f"parse {ms(parse)}  validate {ms(check)}")


if __name__ == "__main__":
    main()
