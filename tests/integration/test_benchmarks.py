"""Every script in benchmarks/ still runs: each in its quickest mode (the fewest rounds, slices and
requests it takes), on the real server and tracer, so that a change that breaks one fails here. The
figures they print are not judged (too few rounds to mean anything): that they come, and that the
script's last line says what it measured, is."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden-v1-both-always.vtrace"


def bench(*args, timeout=300) -> str:
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / args[0]), *map(str, args[1:])],
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert res.returncode == 0, f"{args[0]} exited {res.returncode}: {res.stderr[-2000:]}"
    assert res.stdout.strip(), f"{args[0]} printed nothing"
    return res.stdout


QUICKEST = [
    ("offload_cost.py", "--requests", "2000", "--appends", "2000", "--rounds", "1"),
    ("shim_percall.py", "--calls", "20000", "--rounds", "1"),
    ("openloop_client.py", "--rates", "2000", "--seconds", "0.5", "--rounds", "1"),
    ("recording_load.py", GOLDEN, "--repeat", "1"),
    ("report_speed.py", GOLDEN),
    ("idle_uprobe.py", "--cycles", "1"),
    ("uprobe_hit_cost.py", "--rounds", "1"),
    ("compile_cache.py", "--rounds", "1"),
    ("overhead_intervals.py", "--cycles", "3", "--period", "0.5"),
    ("host_speed.py", "--samples", "3", "--loops", "20000", "--gap", "0"),
    ("predict_matrix.py", "--only", "1", "--duration", "0.5", "--repeat", "1"),
    ("overload.py", "--rate", "2000", "--duration", "1", "--stall", "0.3s", "--period", "0.8s", "--max-pending", "200",
     "--keyspace", "1000", "--sides", "always,offload-reject"),
    ("dirty_replicas.py", "--duration", "0.5", "--repeat", "1", "--readers", "2", "--modes", "replica-blocking"),
]


@pytest.mark.parametrize("args", QUICKEST, ids=[a[0] for a in QUICKEST])
def test_each_benchmark_runs_in_its_quickest_mode(args, needs_bpf):
    bench(*args)


def test_overhead_then_its_slice_noise(tmp_path, needs_bpf):
    slices = tmp_path / "slices.jsonl"
    bench("overhead.py", "--pairs", "1", "--duration", "2", "--slice", "1", "--backends", "ebpf", "--slices", slices)
    assert slices.read_text().strip()
    bench("slice_noise.py", slices)


def test_peers_measures_the_attached_case(tmp_path, needs_bpf):
    """peers.py as users run the attached recording: one ABBA group of the control and of valkeytrace attached
    (`record --attach PID --workload none`), its output JSON last."""
    out = bench("peers.py", "--tools", "none,valkeytrace-ebpf", "--groups", "1", "--slice", "0.5", "--smoke",
                timeout=600)
    last = json.loads(out.strip().splitlines()[-1])
    assert last["valkeytrace_ebpf_slices_per_side"] >= 2 and "none_get_tps_ratio" in last, last


def test_compare_rule(tmp_path, needs_bpf):
    # walltime.py runs on test_compare's eBPF compare (--from), not a compare of its own
    bench("compare_rule.py", "--trials", "1", "--launches", "2", "--duration", "0.5", "--conditions", "aa",
          timeout=600)
