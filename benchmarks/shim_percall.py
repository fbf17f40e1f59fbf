"""Per-call cost of the shim: a C loop of write(2) to /dev/null and of fdatasync on a tmpfs file,
run bare, with the shim preloaded but idle (no env), and recording (shared memory), side by side.

    .venv/bin/python benchmarks/shim_percall.py [--calls 2000000] [--rounds 5]

Prints ns/call per mode (median of rounds) and the added cost; the last line is JSON.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from valkeytrace.tracers.emulation import preload_env, shim_library
from valkeytrace.tracers.region import ShimRegion

LOOP_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    int fd = open("/dev/null", O_WRONLY);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) write(fd, "x", 1);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    d = tempfile.mkdtemp()
    src, exe = os.path.join(d, "loop.c"), os.path.join(d, "loop")
    open(src, "w").write(LOOP_C)
    subprocess.run(["gcc", "-O2", src, "-o", exe], check=True)
    region = ShimRegion()
    modes = {"bare": {}, "preloaded_idle": preload_env(shim_library(), None, None),
             "recording": preload_env(shim_library(), region.path, None)}
    results = {m: [] for m in modes}
    try:
        for _ in range(args.rounds):  # interleaved: the machine is noisy
            for mode, extra in modes.items():
                out = subprocess.run([exe, str(args.calls)], env={**os.environ, **extra},
                                     capture_output=True, text=True, check=True).stdout
                results[mode].append(float(out))
    finally:
        region.close()
    med = {m: statistics.median(v) for m, v in results.items()}
    for m, v in med.items():
        print(f"{m:16s} {v:8.1f} ns/write  (rounds: {', '.join(f'{x:.1f}' for x in results[m])})")
    summary = {"write_ns_bare": med["bare"], "added_ns_idle": med["preloaded_idle"] - med["bare"],
               "added_ns_recording": med["recording"] - med["bare"]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
