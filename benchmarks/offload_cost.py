"""What the virtual offload adds inside the server, per request and per AOF append, measured in
process: a C loop linked with the shim's own sources (built as setup.py builds the shim, -O2)
that does what valkey's threads do, run with the offload off (the shim a pass-through) and on
(durable, early-ack), interleaved rounds, side by side.

    .venv/bin/python benchmarks/offload_cost.py [--requests 200000] [--appends 200000] [--rounds 7]

- per request: a client connection (a socketpair, accepted as the server accepts one) reads a
  GET (or SET) request and writes its reply: the offload parses the request, classifies it by a
  command table, frames the reply and asks the key table and the witness. The SET's reply is not
  held (nothing is queued), so this is the decision's cost, not a wait.
- per AOF append: the main thread's write of a 107-byte AOF record (a SET) to an *.incr.aof file
  on tmpfs, an fdatasync every 50 appends: off, the write(2) itself; on, the copy into the queue
  and the witness's parse (the write and fdatasync move to vt_offload, not timed here).

Prints ns per operation per mode (median of rounds, with the rounds' range) and the added cost;
the last line is JSON.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def _shim_sources() -> list[str]:
    """setup.py's SHIM_SOURCES (read, not run: setup.py builds when run)."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "SHIM_SOURCES")


SOURCES = _shim_sources()

LOOP_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "offload.h"
#include "offload_state.h"
#include "vt_cmds.h"
void vt_conn_accepted(int fd);

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

int main(int argc, char **argv) {
    long n = atol(argv[1]), m = atol(argv[2]);
    static struct vt_offload_control ctl;
    strcpy(ctl.entries[0].name, "set"); ctl.entries[0].flags = VT_CMD_F_WRITE;
    strcpy(ctl.entries[1].name, "get"); ctl.entries[1].flags = VT_CMD_F_READONLY;
    for (int i = 0; i < 2; i++) { ctl.entries[i].first = ctl.entries[i].step = 1; ctl.entries[i].last_plus = 0x8001; }
    ctl.nentries = 2; ctl.table_ready = 1;
    pthread_mutex_lock(&vt_off.mu); vt_off.control = &ctl; vt_cmds_attach(&ctl, vt_off.stats); pthread_mutex_unlock(&vt_off.mu);
    int sv[2]; socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    if (vt_offload_enabled()) vt_conn_accepted(sv[0]);
    const char *get = "*2\r\n$3\r\nGET\r\n$16\r\nkey:000000012345\r\n";
    const char *set = "*3\r\n$3\r\nSET\r\n$16\r\nkey:000000012345\r\n$64\r\n"
                      "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\r\n";
    const char *val = "$64\r\nvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\r\n";
    char buf[512];
    double t[3];
    for (int kind = 0; kind < 2; kind++) {
        const char *req = kind ? set : get, *rep = kind ? "+OK\r\n" : val;
        size_t rl = strlen(req), pl = strlen(rep);
        double a = now(), spent = 0;
        for (long i = 0; i < n; i++) {
            if (write(sv[1], req, rl) != (ssize_t)rl) return 2;     /* the client: not timed */
            double t0 = now();
            if (read(sv[0], buf, sizeof(buf)) != (ssize_t)rl) return 3; /* the server: read, reply */
            if (write(sv[0], rep, pl) != (ssize_t)pl) return 4;
            spent += now() - t0;
            if (read(sv[1], buf, sizeof(buf)) != (ssize_t)pl) return 5;
        }
        (void)a;
        t[kind] = spent / n;
    }
    char path[] = "/dev/shm/vt-offload-cost-XXXXXX", file[128];
    if (!mkdtemp(path)) return 6;
    snprintf(file, sizeof(file), "%s/appendonly.aof.1.incr.aof", path);
    int aof = open(file, O_WRONLY | O_APPEND | O_CREAT, 0600);
    char rec[107];
    memcpy(rec, set, sizeof(rec)); /* one whole SET, as valkey appends it */
    double spent = 0;
    for (long i = 0; i < m; i++) {
        double t0 = now();
        if (write(aof, rec, sizeof(rec)) != (ssize_t)sizeof(rec)) return 7;
        spent += now() - t0;
        if (i % 50 == 49) fdatasync(aof);
    }
    t[2] = spent / m;
    close(aof); unlink(file); rmdir(path);
    printf("%.1f %.1f %.1f\n", t[0], t[1], t[2]);
    return 0;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--appends", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    d = tempfile.mkdtemp()
    src, exe = os.path.join(d, "loop.c"), os.path.join(d, "loop")
    open(src, "w").write(LOOP_C)
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-I", str(ROOT / "csrc"), src, *[str(ROOT / "csrc" / s) for s in SOURCES],
                    "-o", exe, "-lm", "-ldl", "-lpthread"], check=True)
    modes = {"off": {}, "durable": {"VALKEYTRACE_OFFLOAD": "durable"}, "early-ack": {"VALKEYTRACE_OFFLOAD": "early-ack"}}
    what = ("GET request", "SET request", "AOF append")
    results = {m: [] for m in modes}
    for _ in range(args.rounds):  # interleaved: the machine is noisy
        for mode, extra in modes.items():
            env = {k: v for k, v in os.environ.items() if not k.startswith("VALKEYTRACE") and k != "LD_PRELOAD"}
            out = subprocess.run([exe, str(args.requests), str(args.appends)], env={**env, **extra},
                                 capture_output=True, text=True, check=True).stdout
            results[mode].append([float(x) for x in out.split()])
    med = {m: [statistics.median(r[i] for r in v) for i in range(3)] for m, v in results.items()}
    for i, w in enumerate(what):
        for m in modes:
            vals = [r[i] for r in results[m]]
            added = f"  added {med[m][i] - med['off'][i]:+7.1f} ns" if m != "off" else ""
            print(f"{w:12s} {m:10s} {med[m][i]:8.1f} ns  [{min(vals):.1f}, {max(vals):.1f}]{added}")
    print(json.dumps({"rounds": args.rounds, "median_ns": {m: dict(zip(what, v)) for m, v in med.items()},
                      "added_ns": {m: {w: round(med[m][i] - med["off"][i], 1) for i, w in enumerate(what)}
                                   for m in modes if m != "off"}}))


if __name__ == "__main__":
    main()
