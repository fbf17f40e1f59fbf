"""The host's modes (analysis/modes.py): the GET-only passes split by their CPU per request, and the model
run in each. The recording is a real one from this project's VM (read-heavy 64 B, +4 ms, appendfsync
always, --repeat 3): two of its GET-only passes ran in the fast mode (p50 287 and 279 µs, ~89K/s), one in
the slow mode (351 µs, 72K/s). Those passes' p50 and TPS are not fitted (only their p99 is), so each
mode's simulated pass against the passes that ran in it is a test out of sample."""
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from valkeytrace.analysis import calibration, modes, predict, whatif
from valkeytrace.pipeline.params import Group
from valkeytrace.pipeline.sim import simulate
from valkeytrace.recording import format as recfmt
from valkeytrace.recording.model import decode

TWO_MODES = Path(__file__).resolve().parent.parent / "data" / "two-modes-baseline.vtrace"


def test_passes_within_the_gap_are_one_mode_and_beyond_it_two():
    one = modes.split([modes.PassCost(9.0, 11.0), modes.PassCost(9.5, 11.5), modes.PassCost(8.8, 10.9)])
    assert [(m.name, m.passes) for m in one] == [("fast", 3)]
    two = modes.split([modes.PassCost(8.9, 11.2), modes.PassCost(11.4, 13.6), modes.PassCost(8.5, 11.2)])
    assert [(m.name, m.passes) for m in two] == [("fast", 2), ("slow", 1)]
    assert two[0].server_us == pytest.approx(8.7) and two[1].client_us == pytest.approx(13.6)
    # the gap is taken from the cheapest pass: 10% above it is the slow mode, just under it is not
    edge = modes.split([modes.PassCost(10.0, 10.0), modes.PassCost(11.05, 11.05), modes.PassCost(10.9, 10.9)])
    assert [(m.name, m.passes) for m in edge] == [("fast", 2), ("slow", 1)]
    assert modes.split([]) == []


def test_a_modes_weight_is_the_chance_most_repeats_run_in_it():
    fast, slow = modes.ModeCost("fast", 2, 9.0, 11.0), modes.ModeCost("slow", 1, 11.0, 13.0)
    assert modes.weights([fast], 3) == [1.0]
    w = modes.weights([fast, slow], 3)
    q = (1 + modes.SLOW_SHARE_VM * modes.PRIOR_RUNS) / (3 + modes.PRIOR_RUNS)
    assert sum(w) == pytest.approx(1.0) and w[1] == pytest.approx(3 * q * q - 2 * q ** 3)  # 2 or 3 of 3 slow
    assert modes.weights([fast, slow], 1)[1] == pytest.approx(q)
    assert modes.weights([fast, slow], 2)[1] == pytest.approx(q * q + q * (1 - q))  # both, or half a split
    # more slow passes, more weight to the slow mode; the VM's share keeps three passes from deciding alone
    more = modes.weights([modes.ModeCost("fast", 1, 9.0, 11.0), modes.ModeCost("slow", 2, 11.0, 13.0)], 3)
    assert w[1] < more[1] < 0.6


def test_the_modes_figures_are_weighted_geometrically():
    assert modes.weighted([(300.0, 1)]) == pytest.approx(300.0)
    assert modes.weighted([(200.0, 1), (800.0, 1)]) == pytest.approx(400.0)
    assert modes.weighted([(100.0, 2), (800.0, 1)]) == pytest.approx(200.0)
    assert modes.weighted([(100.0, 0.75), (1600.0, 0.25)]) == pytest.approx(200.0)
    assert modes.weighted([(100.0, 1), (None, 1)]) is None
    assert modes.weighted([(0.0, 1), (2.0, 1)]) == pytest.approx(1.0)


def _pass_figures(cal, mode, clients, seconds):
    base = replace(cal.in_mode(mode).params, groups=(Group("GET", clients),), duration_s=seconds, warmup_s=0.05)
    runs = [simulate(base, seed=7 + i).ops["GET"] for i in range(3)]
    return (float(np.median([np.percentile(r.latencies_us, 50) for r in runs])), float(np.median([r.tps for r in runs])))


def test_each_mode_reproduces_the_passes_that_ran_in_it():
    doc = decode(recfmt.read(TWO_MODES))
    cal = calibration.calibrate(doc, "read-heavy", 64)
    assert [(m.cost.name, m.cost.passes) for m in cal.modes] == [("fast", 2), ("slow", 1)]
    passes = calibration.passes_of(doc, 64)
    by_mode = {"fast": [p for p in passes if p.p50_us < 300], "slow": [p for p in passes if p.p50_us > 300]}
    for m in cal.modes:
        p50, tps = _pass_figures(cal, m, passes[0].clients, passes[0].seconds)
        want = by_mode[m.cost.name]
        want_p50, want_tps = np.median([p.p50_us for p in want]), np.median([p.tps for p in want])
        assert abs(p50 / want_p50 - 1) < 0.1 and abs(tps / want_tps - 1) < 0.1, (m.cost, p50, tps, want_p50, want_tps)
    # one mode's costs for all three passes would miss the other's: the split is what makes both hold
    fast_p50, _ = _pass_figures(cal, cal.modes[0], passes[0].clients, passes[0].seconds)
    assert fast_p50 < 0.9 * np.median([p.p50_us for p in by_mode["slow"]])


def test_a_prediction_carries_both_modes_and_lies_between_them():
    cell = predict.predict(recfmt.read(TWO_MODES), predict.Change(offload="durable"), cells=[("read-heavy", 64)]).cells[0]
    fast, slow = cell.modes["fast"].ops["GET"], cell.modes["slow"].ops["GET"]
    assert fast.p50_us < cell.ops["GET"].p50_us < slow.p50_us and slow.tps < cell.ops["GET"].tps < fast.tps
    assert (cell.modes["fast"].passes, cell.modes["slow"].passes) == (2, 1)
    assert "server_us_per_get_slow" in cell.inputs and cell.to_json()["modes"]["slow"]["ops"]["GET"]["p50_us"] == slow.p50_us


CANDIDATE = TWO_MODES.with_name("two-modes-candidate.vtrace")


def test_windows_are_labelled_against_the_cheapest_pass_or_window():
    fast, slow = modes.PassCost(9.2, 10.6), modes.PassCost(11.1, 12.7)
    assert modes.label([slow, slow, fast], []) == ["slow", "slow", "fast"]
    assert modes.label([slow, slow], [fast]) == ["slow", "slow"]      # a fast pass is the reference
    assert modes.label([slow, slow], []) == ["fast", "fast"]          # none faster seen: one mode
    assert modes.label([], [fast]) == []


def test_the_candidates_windows_modes_agree_with_their_latency():
    """The candidate (the same host, the durable offload, minutes later) ran its three GET windows at p50
    335, 335 and 271 µs: the two slow ones are the two whose CPU per request put them in the slow mode.
    The labels read the host's CPU accounting only, the witness is the clients' latency."""
    doc = decode(recfmt.read(CANDIDATE))
    p50s = [r.ops["GET"].p50_us for r in doc.runs if r.workload == "read-heavy" and r.status == "ok"]
    labels = whatif.window_modes(doc, 64)
    assert len(labels) == len(p50s) == 3 and "fast" in labels and "slow" in labels
    assert all((p > 300) == (m == "slow") for p, m in zip(p50s, labels)), (p50s, labels)


def test_the_what_if_judges_the_mode_the_candidate_ran_in_too():
    from valkeytrace.analysis import tables, whatif
    from valkeytrace.reporters.sections import describe_check
    base, cand = recfmt.read(TWO_MODES), recfmt.read(CANDIDATE)
    cells = [c for c in tables.summarize(cand) if c.workload == "read-heavy"]
    checks = whatif.check(base, cand, cells)
    p50 = next(c for c in checks if c.metric == "p50_us")
    assert set(p50.modes) == {"fast", "slow"} and p50.window_modes.count("slow") == 2
    line = describe_check(checks)[0]
    assert "[fast " in line and f"slow mode {p50.modes['slow'].predicted:.0f} µs" in line, line


def test_a_baseline_that_saw_one_mode_says_so_when_the_candidate_ran_in_two():
    from valkeytrace.analysis.whatif import Check
    from valkeytrace.reporters.sections import describe_check
    c = Check("fsync_off_main_thread", "read-heavy", "GET", 64, None, "p50_us", 286.0, 335.0, -14.6, 15.0, "within", {},
              {}, ["slow", "slow", "fast"])
    line = describe_check([c])[0]
    assert "slow, slow, fast" in line and "ran in one mode" in line and "[" not in line, line
    assert "ran in one mode" not in describe_check([replace(c, window_modes=["fast"] * 3)])[0]
