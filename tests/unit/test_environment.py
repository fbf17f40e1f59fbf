"""Every environment knob is read in valkeytrace/environment.py and listed in docs/environment.md."""
import re
from pathlib import Path

import pytest

from valkeytrace import environment

ROOT = Path(__file__).resolve().parents[2]


def test_docs_list_every_knob_and_no_other():
    documented = set(re.findall(r"^\| `(VALKEYTRACE_[A-Z_]+)` \|", (ROOT / "docs" / "environment.md").read_text(), re.M))
    assert documented == set(environment.KNOBS)


def test_no_module_reads_a_knob_itself():
    for path in (ROOT / "src" / "valkeytrace").rglob("*.py"):
        if path.name == "environment.py":
            continue
        text = path.read_text()
        for name in environment.KNOBS:
            assert not re.search(rf"(environ|getenv)[^\n]*{name}", text), \
                f"{path.relative_to(ROOT)} reads {name}: use valkeytrace.environment"


def _set(monkeypatch, name: str, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("value, expected", [(None, 0.005), ("0.02", 0.02), ("0", 0.005), ("2", 0.005), ("x", 0.005)])
def test_loop_duty(monkeypatch, value, expected):
    _set(monkeypatch, "VALKEYTRACE_LOOP_DUTY", value)
    assert environment.loop_duty(0.005) == expected


@pytest.mark.parametrize("value, expected", [
    (None, (0.075, 0.075)), ("0.2", (0.2, 0.2)), ("0.2,any", (0.2, None)), ("0.2, ANY", (0.2, None)),
    ("0.2,0.5", (0.2, 0.5)), ("0.2,x", (0.2, 0.2)), ("x,any", (0.075, 0.075)), ("0", (0.075, 0.075)),
    ("3", (3.0, 3.0)), ("", (0.075, 0.075))])
def test_window_accept(monkeypatch, value, expected):
    _set(monkeypatch, "VALKEYTRACE_WINDOW_ACCEPT", value)
    assert environment.window_accept(0.075) == expected


@pytest.mark.parametrize("accept, took, kept", [
    ((0.2, 0.2), 2.39, True), ((0.2, 0.2), 2.41, False), ((0.2, 0.2), 1.61, True), ((0.2, 0.2), 1.59, False),
    ((0.2, None), 15.0, True), ((0.2, None), 1.59, False), ((0.2, 0.5), 2.9, True), ((0.2, 0.5), 3.1, False)])
def test_a_window_is_kept_within_its_acceptance_either_way(accept, took, kept):
    from valkeytrace.workload.benchmark import WindowAccept
    assert WindowAccept(*accept).keeps(took, 2.0) is kept


def test_probe_groups_override(monkeypatch):
    from valkeytrace.tracers import ebpf_plan

    monkeypatch.setenv("VALKEYTRACE_PROBES", "calls, sched,bogus")
    assert ebpf_plan.probe_groups(("syscalls",)) == {"calls", "sched"}
    monkeypatch.delenv("VALKEYTRACE_PROBES")
    assert ebpf_plan.probe_groups(("syscalls",)) == {"calls", "fs", "sched", "requests", "syscalls"}
