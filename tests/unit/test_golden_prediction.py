"""The model's output pinned: `predict --emulate-offload durable` from the stored two-speed baseline
(tests/data/two-modes-baseline.vtrace) gives the figures and intervals of
tests/data/golden-predict-two-modes.json. The simulation is seeded, so any change to the model, its
calibration or its intervals moves a figure here, and the diff says so (regenerate the file with the
command in its test, and say why in the commit)."""
import json
import math
from pathlib import Path

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


def test_the_models_output_on_a_stored_recording_is_pinned():
    # made by: valkeytrace predict tests/data/two-modes-baseline.vtrace --emulate-offload durable --format json,
    # keeping change, interval_level, each cell's ops/server/self_check/widening and the fitted inputs' names
    want = json.loads((DATA / "golden-predict-two-modes.json").read_text())
    got = json.loads(json.dumps(predict.predict(recfmt.read(DATA / "two-modes-baseline.vtrace"),
                                                predict.Change(offload="durable")).to_json()))
    got = {"change": got["change"], "interval_level": got["interval_level"],
           "cells": [{k: c[k] for k in ("workload", "value_size", "ops", "server", "self_check", "widening")}
                     for c in got["cells"]],
           "fitted": {k: v["fitted"] for k, v in got["model"]["cells"].items()}}
    diff = _diff(want, got)
    assert not diff, f"{len(diff)} figures of the model moved: {diff[:12]}"
    # and the test can fail: a moved figure is seen
    want["cells"][0]["ops"]["GET"]["p50_us"] += 1
    assert _diff(want, got)
