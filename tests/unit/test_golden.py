"""Golden recordings (format 1, made by real runs on this project's reference machine) keep
loading and rendering in every format as the code moves on."""
import io
import json
from pathlib import Path

import pytest

from valkeytrace.recording import format as recfmt
from valkeytrace.analysis import report as base
from valkeytrace.reporters import csvfmt, jsonfmt, markdown, perfetto, text

DATA = Path(__file__).resolve().parent.parent / "data"
ALWAYS = DATA / "golden-v1-both-always.vtrace"
EVERYSEC = DATA / "golden-v1-ebpf-everysec.vtrace"


@pytest.fixture(scope="module")
def compared():
    return base.analyse([(str(p), recfmt.read(p)) for p in (ALWAYS, EVERYSEC)])


@pytest.mark.parametrize("renderer", [text.render, markdown.render, jsonfmt.render, csvfmt.render])
def test_every_format_renders_both_sides_figures(compared, renderer):
    """Each format shows each side's label and its read-heavy GET p50, as the recording's runs
    give it (the median of the repeats, computed here from the raw runs, not by the analysis)."""
    out = io.StringIO()
    renderer(compared, out)
    text_out = out.getvalue()
    for path in (ALWAYS, EVERYSEC):
        doc = recfmt.read(path)
        p50s = sorted(r["ops"]["GET"]["p50_us"] for r in doc["runs"]
                      if r["status"] == "ok" and r["workload"] == "read-heavy" and r["value_size"] == 64)
        median = p50s[len(p50s) // 2] if len(p50s) % 2 else (p50s[len(p50s) // 2 - 1] + p50s[len(p50s) // 2]) / 2
        assert doc["label"] in text_out
        shown = {f"{median:,.0f}", f"{median:.0f}", f"{round(median, 1)}", f"{median:.1f}"}
        assert any(s in text_out for s in shown), (doc["label"], median)


def test_markdown_has_the_server_threads_per_cell(compared):
    out = io.StringIO()
    markdown.render(compared, out)
    md = out.getvalue()
    assert md.count("## Server threads") == 1
    for label in ("fsync-always", "fsync-everysec"):
        assert f"**{label} · read-heavy 64 B · server threads (" in md
    tables = md.count("· server threads (")
    assert tables == sum(1 for run in compared.runs for c in run.cells if c.server) >= 2
    assert md.count("- main-thread budget: on CPU") == tables
    assert "| main | fdatasync |" in md and "| bio_aof | fdatasync |" in md


def test_golden_facts(compared):
    rep = jsonfmt.build(compared)
    always = {c["workload"]: c for c in rep["runs"][0]["cells"]}["read-heavy"]["server"]
    everysec = {c["workload"]: c for c in rep["runs"][1]["cells"]}["read-heavy"]["server"]
    assert always["main_thread"]["fdatasync_count"] > 0
    assert always["cross_check"]["fdatasync"]["count_diff_pct"] <= 5
    assert everysec["main_thread"]["fdatasync_count"] == 0
    assert rep["runs"][0]["emulation"]["fsync_delay"]["median_ns"] == 1_000_000
    assert rep["compare"]["explanation"]
    json.dumps(rep, allow_nan=False)


def test_perfetto_from_golden():
    trace = perfetto.build(recfmt.read(EVERYSEC))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert any("bio_aof" in n for n in names)
