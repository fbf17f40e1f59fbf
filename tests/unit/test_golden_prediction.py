"""The model's output pinned: `predict --emulate-offload durable` from the stored two-speed baseline
(tests/data/two-modes-baseline.vtrace) gives the figures and intervals of
tests/data/golden-predict-two-modes.json. The simulation is seeded, so any change to the model, its
calibration or its intervals moves a figure here, and the diff says so (regenerate the file with the
command in its test, and say why in the commit). The two-speed test shares its simulation."""
import json
import math
from pathlib import Path

import pytest

from valkeytrace.analysis import predict
from valkeytrace.recording import format as recfmt

DATA = Path(__file__).resolve().parent.parent / "data"


def _diff(want, got, path="", out=None):
    out = [] if out is None else out
    if isinstance(want, dict):
        for k, v in want.items():
            _diff(v, got.get(k) if isinstance(got, dict) else None, f"{path}.{k}", out)
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            out.append(f"{path}: {want!r} -> {got!r}")
        else:
            for i, (a, b) in enumerate(zip(want, got)):
                _diff(a, b, f"{path}[{i}]", out)
    elif isinstance(want, float) and isinstance(got, (int, float)):
        if not math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-9):
            out.append(f"{path}: {want!r} -> {got!r}")
    elif want != got:
        out.append(f"{path}: {want!r} -> {got!r}")
    return out


@pytest.fixture(scope="module")
def durable():
    """The stored two-speed baseline (its GET-only passes at 19.9, 19.9 and 25.0 µs of CPU a request) and its
    prediction under the durable offload: one simulation for the two tests below."""
    doc = recfmt.read(DATA / "two-modes-baseline.vtrace")
    return doc, predict.predict(doc, predict.Change(offload="durable"))


def test_the_models_output_on_a_stored_recording_is_pinned(durable):
    # made by: valkeytrace predict tests/data/two-modes-baseline.vtrace --emulate-offload durable --format json,
    # keeping change, interval_level, each cell's ops/server/self_check/widening and the fitted inputs' names
    want = json.loads((DATA / "golden-predict-two-modes.json").read_text())
    got = json.loads(json.dumps(durable[1].to_json()))
    got = {"change": got["change"], "interval_level": got["interval_level"],
           "cells": [{k: c[k] for k in ("workload", "value_size", "ops", "server", "self_check", "widening")}
                     for c in got["cells"]],
           "fitted": {k: v["fitted"] for k, v in got["model"]["cells"].items()}}
    diff = _diff(want, got)
    assert not diff, f"{len(diff)} figures of the model moved: {diff[:12]}"
    # and the test can fail: a moved figure is seen
    want["cells"][0]["ops"]["GET"]["p50_us"] += 1
    assert _diff(want, got)


def test_a_prediction_from_two_speeds_is_wider_than_from_one(durable):
    """The same recording with its slow pass made as fast as the others: the range narrows (two speeds in one
    recording widen it) and the TPS moves toward the fast figure."""
    import msgspec
    from valkeytrace.recording.model import decode
    doc = decode(durable[0])
    wide = next(c for c in durable[1].cells if c.workload == "read-heavy" and c.value_size == 64).ops["GET"]
    passes = [r.demand for r in doc.runs if r.workload == "read-heavy" and r.demand and r.demand.host_cpu]
    fast = min(passes, key=lambda p: p.host_cpu.server_cores + p.host_cpu.clients_cores)
    one = msgspec.structs.replace(doc, runs=[msgspec.structs.replace(r, demand=fast) if r.demand else r for r in doc.runs])
    narrow = predict.predict(one, predict.Change(offload="durable"), [("read-heavy", 64)]).cells[0].ops["GET"]
    width = lambda o, k: o.interval[k][1] / o.interval[k][0]  # noqa: E731
    assert width(wide, "tps") > width(narrow, "tps") and width(wide, "p50_us") > width(narrow, "p50_us")
    assert narrow.tps > wide.tps
    for o in (wide, narrow):
        for k in ("tps", "p50_us", "p95_us", "p99_us"):
            lo, hi = o.interval[k]
            assert lo <= getattr(o, k) <= hi, (k, o)
