"""The recording plan (valkeytrace.plan): one set of options for record and compare, a side's
options on top of the common ones, the usage checks made once, and a plan that survives the trip
to a compare launch's child (JSON)."""
import dataclasses

import pytest

from valkeytrace import plan as planning
from valkeytrace.cli.compare import compare
from valkeytrace.cli.options import COMMON
from valkeytrace.cli.record import record
from valkeytrace.errors import VTUsageError
from valkeytrace.tracers.emulation import parse_fsync_delay


def _plan(**kw):
    base = dict(workloads=("read-heavy",), sizes=(64,), repeat=1, duration=1.0, backend="none",
                server_config={"hz": "20"}, inject_spec="4ms")
    return planning.build(planning.RecordOptions(**{**base, **kw}))


def test_both_commands_take_every_common_option():
    names = {p.name for p in record.params}, {p.name for p in compare.params}
    for opt in COMMON:
        name = opt(lambda: None).__click_params__[0].name
        assert name in names[0] and name in names[1], name


def test_a_side_adds_to_the_common_config_and_replaces_the_rest():
    common = _plan()
    side = common.for_side(binary="/bin/true", config={"io-threads-do-reads": "no"}, label="b",
                           fsync_delay=parse_fsync_delay("5ms"))
    assert side.server.config == {"hz": "20", "io-threads-do-reads": "no"} and side.server.binary == "/bin/true"
    assert side.label == "b" and side.emulation.fsync_delay["median_ns"] == 5_000_000
    assert common.server.config == {"hz": "20"} and common.emulation.fsync_delay != side.emulation.fsync_delay
    # a side's sensitivity reaches the matrix (the recorder runs Settings)
    sens = _plan(backend="shim").for_side(sensitivity_ns=(2_000_000,), sensitivity_runs=1)
    assert sens.settings.sensitivity == (2_000_000,) and sens.settings.sensitivity_runs == 1
    assert len(sens.settings.matrix()) == 2 and len(common.settings.matrix()) == 1


def test_the_plan_survives_json():
    p = dataclasses.replace(_plan(sensitivity_spec="2ms,4ms", backend="shim").for_side(offload="durable"),
                            output="/tmp/x.vtrace")
    back = planning.RecordPlan.from_json(p.as_json())
    assert back == p and back.settings.matrix() == p.settings.matrix()


def test_usage_errors_are_made_once_for_both_commands():
    with pytest.raises(VTUsageError, match="--attach"):
        _plan(attach_pid=1)  # an injected delay needs a launched server
    with pytest.raises(VTUsageError, match="needs a tracer"):
        _plan(sensitivity_spec="2ms")  # backend none
    with pytest.raises(VTUsageError, match="appendfsync always"):
        _plan(appendfsync="everysec", offload_mode="durable")
    with pytest.raises(VTUsageError, match="only shape the embedded server"):
        _plan(server_command=("valkey-server",), embedded_only_given=("appendfsync",), inject_spec=None)
    # a side's option is checked as the command's would be
    everysec = _plan(appendfsync="everysec")
    with pytest.raises(VTUsageError, match="appendfsync always"):
        everysec.for_side(offload="durable")
    assert dataclasses.replace(everysec, label="x").label == "x"


def test_a_gather_window_belongs_to_the_durable_offload_and_travels_with_its_side():
    g = _plan(offload_mode="durable", offload_gather="1ms")
    assert g.emulation.gather_ns == 1_000_000
    assert planning.RecordPlan.from_json(g.as_json()).emulation.gather_ns == 1_000_000
    for bad in ("-1ms", "nan", "2s", "fast"):
        with pytest.raises(VTUsageError, match="--offload-gather"):
            _plan(offload_mode="durable", offload_gather=bad)
    for mode in (None, "early-ack"):
        with pytest.raises(VTUsageError, match="needs --emulate-offload durable"):
            _plan(offload_mode=mode, offload_gather="1ms")
    side = _plan().for_side(offload="durable", gather_ns=500_000)
    assert side.emulation.gather_ns == 500_000
    with pytest.raises(VTUsageError, match="needs --emulate-offload durable"):
        _plan().for_side(gather_ns=500_000)
