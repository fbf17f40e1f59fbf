"""export --table (issue 76): several real recordings (tests/data) as one table, a typed row per recording x cell x op
whose figures are the report's (its JSON, rendered here from each recording alone, and the medians of the raw runs
computed here); Parquet's columns typed; without pyarrow, one line naming the extra."""
import csv
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from valkeytrace.analysis import report as base
from valkeytrace.analysis.fleet import COLUMNS, column_types
from valkeytrace.cli import main
from valkeytrace.recording import format as recfmt
from valkeytrace.reporters import jsonfmt

DATA = Path(__file__).resolve().parent.parent / "data"
RECS = [DATA / f"{n}.vtrace" for n in ("golden-v2-compare-baseline", "golden-v2-compare-candidate",
                                        "golden-v1-both-always", "golden-v1-ebpf-everysec", "two-modes-candidate")]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    out = tmp_path_factory.mktemp("table") / "all.csv"
    res = CliRunner().invoke(main, ["export", *map(str, RECS), "--table", str(out)])
    assert res.exit_code == 0, res.output
    return list(csv.DictReader(out.open()))


def _report(path) -> dict:
    buf = io.StringIO()
    jsonfmt.render(base.analyse([(str(path), recfmt.read(path))], with_whatif=False), buf)
    return json.loads(buf.getvalue())


def test_one_row_per_recording_cell_and_op_with_the_reports_figures(table):
    assert list(table[0]) == list(COLUMNS)
    for path in RECS:
        rep = _report(path)
        rows = [r for r in table if r["recording"] == path.name]
        want = [(c["workload"], c["value_size"], op, o) for c in rep["runs"][0]["cells"] for op, o in c["ops"].items()]
        assert len(rows) == len(want) > 0, path.name
        for workload, size, op, o in want:
            (row,) = [r for r in rows if (r["workload"], int(r["value_size"]), r["op"]) == (workload, size, op)]
            assert row["label"] == rep["runs"][0]["label"] and row["server_version"]
            for key in ("tps", "p50_us", "p95_us", "p99_us"):
                assert (float(row[key]) if row[key] else None) == o.get(key), (path.name, workload, op, key)
            raw = [r["ops"][op]["p50_us"] for r in recfmt.read(path)["runs"]
                   if r["status"] == "ok" and r["workload"] == workload and r["value_size"] == size
                   and not r.get("fsync_extra_delay_ns") and r["ops"].get(op, {}).get("p50_us") is not None]
            if raw:  # the median of the repeats, from the runs themselves
                assert float(row["p50_us"]) == pytest.approx(float(np.median(raw)))


def test_the_recordings_side_settings_and_the_main_threads_budget(table):
    sides = {r["recording"]: r["side"] for r in table}
    assert sides["golden-v2-compare-baseline.vtrace"] == "baseline"
    assert sides["golden-v2-compare-candidate.vtrace"] == "candidate" and sides["golden-v1-both-always.vtrace"] == ""
    cand = [r for r in table if r["recording"] == "golden-v2-compare-candidate.vtrace"]
    assert {r["offload"] for r in cand} == {"durable"} and {r["fsync_delay_ms"] for r in cand} == {"4.0"}
    always = [r for r in table if r["recording"] == "golden-v2-compare-baseline.vtrace" and r["op"] == "GET"][0]
    budget = [float(always[f"main_{k}"]) for k in ("on_cpu_pct", "blocked_in_fsync_pct", "blocked_in_aof_write_pct",
                                                    "waiting_for_cpu_pct", "idle_pct", "other_blocked_pct")]
    assert sum(budget) == pytest.approx(100.0, abs=0.5) and budget[1] > 50  # blocked in fsync, as its report says


def test_parquet_columns_are_typed(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "all.parquet"
    assert CliRunner().invoke(main, ["export", *map(str, RECS[:2]), "--table", str(out)]).exit_code == 0
    t = pq.read_table(out)
    types = {f.name: str(f.type) for f in t.schema}
    assert types["value_size"] == "int64" and types["p50_us"] == "double" and types["label"] == "string"
    assert types["held_replies_peak"] == "int64" and types["rate"] == "double"
    assert column_types()["n"] is int and t.num_rows == 6
    assert t.column("p50_us").to_pylist()[0] == pytest.approx(13911.0)


def test_without_pyarrow_one_line_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    out = tmp_path / "all.parquet"
    res = CliRunner().invoke(main, ["export", str(RECS[0]), "--table", str(out)])
    assert res.exit_code == 1 and "pip install 'valkeytrace[parquet]'" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()


def test_bad_table_paths(tmp_path):
    res = CliRunner().invoke(main, ["export", str(RECS[0]), "--table", str(tmp_path / "all.xlsx")])
    assert res.exit_code == 2 and ".csv or .parquet" in res.output
    res = CliRunner().invoke(main, ["export", str(RECS[0]), "--table", str(RECS[0])])
    assert res.exit_code == 2 and not list(tmp_path.iterdir())
