"""Report and timeline speed, from real recordings.

    .venv/bin/python benchmarks/report_speed.py [RECORDING ...]

1. `report` (json and text) on each RECORDING given (e.g. the demo's 3-size x 3-repeat x
   2-workload recordings), in a fresh process each, wall time.
2. A 60 s main-thread blocked timeline: the first traced run of the first RECORDING (or the golden
   recording) has its events tiled to fill 60 s at the rate they were recorded; the resulting
   recording is written, then loaded and exported to Perfetto, timed.
The last line is JSON.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from valkeytrace.recording import format as recfmt
from valkeytrace.reporters import perfetto

VT = str(Path(sys.executable).with_name("valkeytrace"))
GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "data" / "golden-v1-both-always.vtrace"


def timed(cmd) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main():
    paths = sys.argv[1:] or [str(GOLDEN)]
    out = {}
    for p in paths:
        out[f"report_json_s[{os.path.basename(p)}]"] = round(timed([VT, "report", p, "--format", "json", "-o", os.devnull]), 3)
        out[f"report_text_s[{os.path.basename(p)}]"] = round(timed([VT, "report", p, "-o", os.devnull]), 3)
    doc = recfmt.read(paths[0])
    run = next(r for r in doc["runs"] if r.get("server") and r["server"]["blocked_timeline"]["events"])
    events = run["server"]["blocked_timeline"]["events"]
    window_ns = run["server"]["window_ns"]
    tiled = []
    for k in range(int(60e9 // window_ns) + 1):
        tiled.extend([[e[0] + k * window_ns, *e[1:]] for e in events if e[0] + k * window_ns < 60e9])
    big = copy.deepcopy(doc)
    big["runs"] = [copy.deepcopy(run)]
    big["runs"][0]["server"]["window_ns"] = int(60e9)
    big["runs"][0]["server"]["blocked_timeline"]["events"] = tiled
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "60s.vtrace")
        recfmt.write(path, big)
        t = time.perf_counter()
        loaded = recfmt.read(path)
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        trace = perfetto.build(loaded)
        export_s = time.perf_counter() - t
    out.update({"timeline_60s_events": len(tiled), "timeline_60s_load_s": round(load_s, 3),
                "timeline_60s_perfetto_s": round(export_s, 3),
                "timeline_60s_slices": sum(1 for e in trace["traceEvents"] if e["ph"] == "X")})
    for k, v in out.items():
        print(f"{k:45s} {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
