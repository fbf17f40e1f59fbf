"""#3381's designs (record --offload-design, compare --designs): the disk that blocks writes as a spec, a design
through the plan to the shim's environment and back in the recording's figures, compare --designs' phases, and
its table's row from a design's recordings."""
import dataclasses

import pytest

from valkeytrace import plan as planning
from valkeytrace.analysis import offload
from valkeytrace.analysis.designs import DesignRow, design_row
from valkeytrace.cli.designs import design_plans, parse_designs
from valkeytrace.errors import VTUsageError
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.reporters.designs_table import cells
from valkeytrace.tracers import offload as voff
from valkeytrace.tracers.emulation import describe_delay, parse_fsync_delay


def _plan(**kw):
    base = dict(workloads=("read-heavy", "write-only"), sizes=(64,), repeat=1, duration=1.0, backend="shim",
                inject_spec="4ms")
    return planning.build(planning.RecordOptions(**{**base, **kw}))


def test_blocks_writes_composes_with_a_delay_and_a_stall():
    d = parse_fsync_delay("2ms,stall:3s/6s,blocks-writes")
    assert d["env"] == "const:2000000;stall:3000000000/6000000000;blocks-writes"
    assert d["blocks_writes"] and d["stall_ns"] == 3_000_000_000 and d["median_ns"] == 2_000_000
    assert parse_fsync_delay("4ms,blocks-writes")["env"] == "const:4000000;blocks-writes"
    assert parse_fsync_delay("lognormal:4ms,0.3,blocks-writes")["env"] == "lognormal:4000000,0.3;blocks-writes"
    assert "blocks_writes" not in parse_fsync_delay("4ms")
    assert "blocks-writes" in describe_delay(d)
    for bad in ("blocks-writes", "4ms,blocks", "4ms,blocks-writes,x"):
        with pytest.raises(VTUsageError):
            parse_fsync_delay(bad)


def test_the_design_reaches_the_shim_and_the_recording():
    p = _plan(offload_mode="durable", offload_design="main-write")
    assert p.emulation.design == "main-write"
    assert planning.RecordPlan.from_json(p.as_json()).emulation.design == "main-write"  # a compare launch's child
    st = voff.OffloadStats("durable", design="bio-write-block")
    try:
        assert st.env()["VALKEYTRACE_OFFLOAD_DESIGN"] == "bio-write-block"
    finally:
        st.close()
    with pytest.raises(VTUsageError, match="--emulate-offload"):
        _plan(offload_design="main-write")


def _hist(*ns) -> dict:
    h = LatencyHistogram()
    for v in ns:
        h.record(v)
    return h.to_dict()


def test_the_summary_tells_the_designs_apart():
    doc = {"format": "valkeytrace", "version": 1, "label": "x", "complete": True,
           "emulation": {"offload": {"mode": "durable", "design": "main-write"}},
           "runs": [{"workload": "write-only", "value_size": 64, "status": "ok",
                     "offload": {"postponed_writes": 40, "forced_writes": 1, "handoff_waits": 0, "handoff_wait_ns": 0, "jobs_waited": [0] * 8,
                                 "postpone_ns": _hist(5_000_000, 2_000_100_000),
                                 "main_write_ns": _hist(20_000, 950_000_000)}}]}
    s = offload.summary(doc)
    assert s.design == "main-write" and s.totals["postponed_writes"] == 40
    assert 1999 <= s.longest_postponement_ms <= 2001 and s.handoff_wait_ms == 0
    assert 940 <= s.longest_main_write_ms <= 960
    doc["emulation"]["offload"] = {"mode": "durable"}  # before 2026-12-07: bio-write
    doc["runs"][0]["offload"] = {"handoff_waits": 3, "handoff_wait_ns": 7_500_000, "jobs_waited": [0] * 8}
    s = offload.summary(doc)
    assert s.design == "bio-write" and s.handoff_wait_ms == 7.5 and s.longest_postponement_ms is None


def test_compare_designs_phases():
    assert parse_designs("always, main-write,always") == ["always", "main-write"]
    with pytest.raises(VTUsageError):
        parse_designs("always,option-3")
    common = _plan()
    always, mw = design_plans(common, "always"), design_plans(common, "main-write")
    assert always["shape"].emulation.offload is None and always["shape"].label == "always"
    assert mw["shape"].emulation.offload == "durable" and mw["shape"].emulation.design == "main-write"
    stall, cut = mw["stall"], mw["cut"]
    assert stall.emulation.fsync_delay["env"] == "const:4000000;stall:3000000000/6000000000;blocks-writes"
    assert stall.settings.workloads == ("write-only",) and stall.settings.rates and stall.settings.pool == "grow"
    assert cut.verify_durability == "power-cut" and cut.settings.workloads == ("write-only",) and cut.settings.rates
    assert mw["shape"].settings == common.settings  # the shape is the common options'
    with pytest.raises(VTUsageError):
        design_plans(_plan(inject_spec="2ms,stall:1s/2s"), "bio-write")


def test_a_design_row_with_nothing_measured_says_so():
    row = design_row("main-write", None, None, None)
    assert row == DesignRow("main-write")
    text = cells(dataclasses.replace(row, postponed_writes=12, longest_postponement_ms=2000.0, acked=10,
                                     acked_lost=0, main_aof_writes=0))
    assert text[0] == "main-write" and "12 (2,000 ms)" in text and "0 of 10" in text and "none" in text


def test_the_model_knows_the_designs():
    """The pipeline model (predict --offload-design): one SET client under each design, every step known (as
    tests/unit/test_pipeline_sim.py's durable offload): main-write's job only fdatasyncs (the main thread wrote);
    bio-write-block's GETs wait behind the jobs their main thread's hand-offs wait for, bio-write's do not."""
    from test_pipeline_sim import A, CR, F, SR, SW, WAKE, params

    from valkeytrace.pipeline.params import Group
    from valkeytrace.pipeline.sim import simulate

    def run(design, groups):
        p = params(groups, mode="durable")
        return simulate(dataclasses.replace(p, durability=dataclasses.replace(p.durability, design=design)))
    bio = WAKE + SR + A + (A + F) + SW + WAKE + CR
    assert run("bio-write", [Group("SET", 1)]).ops["SET"].p50_us == pytest.approx(bio, abs=0.01)
    assert run("main-write", [Group("SET", 1)]).ops["SET"].p50_us == pytest.approx(bio - A, abs=0.01)
    mixed = [Group("GET", 4), Group("SET", 4, measured=False)]
    assert run("bio-write-block", mixed).ops["GET"].p99_us > F / 2 > run("bio-write", mixed).ops["GET"].p99_us


def test_compare_designs_refuses_what_it_would_ignore_or_mix(tmp_path):
    """A per-side option or --launches is refused, not silently ignored; a directory holding recordings another
    command made is refused, not mixed into the table; each in one line, before anything is recorded."""
    from click.testing import CliRunner

    from valkeytrace.cli import main as cli

    runner = CliRunner()
    for extra, said in ((["--launches", "2"], "--launches"), (["--candidate-label", "x"], "--candidate-label"),
                        (["--baseline-offload-design", "main-write"], "--baseline-offload-design")):
        res = runner.invoke(cli, ["compare", "--designs", "always,bio-write", *extra, "-o", str(tmp_path / "d")])
        assert res.exit_code != 0 and f"{said} does not apply" in res.output, res.output
        assert not (tmp_path / "d").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "baseline.vtrace").write_bytes(b"")
    res = runner.invoke(cli, ["compare", "--designs", "always,bio-write", "--sizes", "64", "--backend", "shim",
                              "-o", str(tmp_path / "old")])
    assert res.exit_code != 0 and "did not make" in res.output, res.output
    assert (tmp_path / "old" / "baseline.vtrace").read_bytes() == b""
