"""What a person reads first (issue 76): the text compare of a real recording pair (the durable virtual offload
against fsync-always) fits a 100-column terminal, its sides by short names with one legend line, no label
broken over more than two lines, the model's row readable, nothing wrapped at 160 columns, the memory as a
table; `valkeytrace --help` lists each command once; README opens with the two commands a newcomer runs."""
import io
import re
from pathlib import Path

import pytest

from valkeytrace.analysis import report as base
from valkeytrace.analysis.memory import CellMemory
from valkeytrace.recording import format as recfmt
from valkeytrace.reporters import markdown, text

import golden_pair

DATA = Path(__file__).resolve().parent.parent / "data"
ROOT = DATA.parent.parent
PAIR = [DATA / "golden-v2-compare-baseline.vtrace", DATA / "golden-v2-compare-candidate.vtrace"]
SEP = re.compile(r"[│┃|]")


@pytest.fixture(scope="module")
def compared():
    return golden_pair.analysed()


def _render(inp, columns: int, monkeypatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    out = io.StringIO()
    text.render(inp, out)
    return out.getvalue().splitlines()


def _label_breaks(lines: list[str]) -> int:
    """The most lines a table's first column took for one label (the lines below its first: only it there)."""
    run = worst = 0
    for line in lines:
        parts = SEP.split(line)
        run = run + 1 if len(parts) >= 3 and parts[0].strip() and not any(p.strip() for p in parts[1:]) else 0
        worst = max(worst, run)
    return worst + 1


def _table_rows(lines: list[str], first: str) -> list[list[str]]:
    return [[c.strip() for c in SEP.split(x)] for x in lines if SEP.search(x) and SEP.split(x)[0].strip() == first]


def test_the_compare_fits_100_columns_with_short_side_names_and_a_legend(compared, monkeypatch):
    lines = _render(compared, 100, monkeypatch)
    assert max(len(x) for x in lines) <= 100
    assert _label_breaks(lines) <= 2
    assert lines[0].startswith("offload vs always")
    assert "always = fsync-always; offload = virtual-offload-durable" in lines[1]  # the one legend line
    for name in ("always", "offload", "predicted", "delta"):  # before: "virtual-offlo / ad-durable", "predicted /
        assert len(_table_rows(lines, name)) == 2, name  # (model, from / the baseline)": a row of each table
    # the model's figure on its row, its range alone on the line below (100 columns cannot hold both)
    pred = lines.index(next(x for x in lines if x.startswith("predicted ")))
    assert [c.strip() for c in SEP.split(lines[pred])][3:] == ["37.28", "1,175", "2,054", "3,599"]
    assert [c.strip() for c in SEP.split(lines[pred + 1])][3:] == ["[33.05, 42.00]", "[822, 1,686]", "[1,443, 2,929]",
                                                                   "[1,857, 6,984]"]


def test_the_verdict_and_the_why_open_the_first_screen(compared, monkeypatch):
    lines = _render(compared, 100, monkeypatch)
    head = "\n".join(lines[:25])
    assert "read-heavy GET 64 B: p50 −94.80% (13.91 ms -> 723 µs)" in head
    assert "write-only SET 64 B: p50 −42.44%" in head
    assert "what-if outside its 90% range: p50 +62%; inside: p99 +44%, TPS -8%" in head.replace("\n", "")
    why = next(i for i, x in enumerate(lines) if "Why" in x and "─" in x)
    assert why < 25 and "Baseline (fsync-always): the main thread spent 80%" in " ".join(lines[why:25])


def test_nothing_wraps_at_160_columns(compared, monkeypatch):
    lines = _render(compared, 160, monkeypatch)
    tables = [x for x in lines if SEP.search(x) and len(SEP.split(x)) >= 3]
    assert tables and all(SEP.split(x)[0].strip() for x in tables), "a table row continued on a second line"
    assert ["37.28 [33.05, 42.00]", "2.39", "1,175 [822, 1,686]", "2,054 [1,443, 2,929]", "3,599 [1,857, 6,984]"] == \
        [c.strip() for c in SEP.split(_one(lines, "predicted", "GET"))][3:]
    assert lines[0].startswith("offload vs always")


def _one(lines, first, op):
    (row,) = [x for x in lines if SEP.search(x) and SEP.split(x)[0].strip() == first and f"│ {op} " in x]
    return row


def _with_memory(inp):
    """The recording pair with made-up peaks (the golden pair predates the memory sampler): the candidate's
    offload held replies, both sides an AOF buffer and a resident set."""
    key = ("write-only", 64, None)
    inp.runs[0].memory = {key: CellMemory(None, None, None, 4_900, 20_300, 21_000_000, None, 19_800, None, 2, 20)}
    inp.runs[1].memory = {key: CellMemory(1_234, 61_700, 1_200, 5_300, 23_200, 24_000_000, None, 22_000, 7, 2, 20,
                                          behind_replies_peak=30)}
    return inp


def test_memory_is_a_table_per_workload_not_a_sentence(monkeypatch):
    inp = _with_memory(base.analyse([(str(p), recfmt.read(p)) for p in PAIR], with_whatif=False))  # its own: changed
    lines = _render(inp, 100, monkeypatch)
    (head,) = [x for x in lines if "Held replies" in x]
    assert [c.strip() for c in SEP.split(head)] == ["Write-only (SET)", "Value", "Held replies", "Held bytes",
                                                    "Dirty keys", "AOF buffer", "RSS peak", "RSS from"]
    rows = lines[lines.index(head) + 2:lines.index(head) + 4]
    assert [c.strip() for c in SEP.split(rows[0])] == ["always", "64 B", "–", "–", "–", "4.9 kB", "20.8 MB", "20.3 MB"]
    assert [c.strip() for c in SEP.split(rows[1])] == ["offload", "64 B", "1,234 (+30)", "61.7 kB", "1,200", "5.3 kB",
                                                       "23.8 MB", "22.5 MB"]
    assert "7 AOF write(s) past valkey's 2 s wait" in "\n".join(lines)
    assert not any("memory:" in x or "held replies peak" in x for x in lines)  # today's main: one sentence of them
    md = io.StringIO()
    markdown.render(inp, md)
    assert "| Write-only (SET) | Value | Held replies | Held bytes | Dirty keys | AOF buffer | RSS peak | RSS from |" \
        in md.getvalue()


def test_help_lists_each_command_once_with_its_summary():
    from click.testing import CliRunner

    from valkeytrace.cli import COMMANDS, SUMMARIES, main

    assert set(SUMMARIES) == set(COMMANDS)
    for width in ("80", "50"):
        out = CliRunner().invoke(main, ["--help"], env={"COLUMNS": width}).output
        for cmd in COMMANDS:
            assert len([x for x in out.splitlines() if re.match(rf"\s+{cmd}\s", x)]) == 1, (width, cmd, out)
    assert "merge    join the recordings of a primary and its replicas" in CliRunner().invoke(main, ["--help"]).output


def test_the_readme_opens_with_the_two_commands_and_what_the_demo_shows():
    readme = (ROOT / "README.md").read_text().splitlines()
    head = "\n".join(readme[:40])
    assert "make demo" in head and "make test" in head and "What it shows" in head
    assert readme.index("## Compare your two builds") > 40  # the 22-minute recipe below them
    body = "\n".join(readme)
    assert body.count("<!-- demo-excerpt:start -->") == 1 and body.count("<!-- demo-excerpt:end -->") == 1
