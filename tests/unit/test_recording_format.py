"""The .vtrace container: round trip, atomic write, and every malformed file refused clearly."""
import json
import zlib

import pytest

from valkeytrace.errors import RecordingError, VTError
from valkeytrace.recording import format as recfmt


def minimal_doc():
    return {"format": "valkeytrace-recording", "version": 1, "label": "x", "complete": True,
            "server": {}, "settings": {}, "runs": [
                {"workload": "read-heavy", "value_size": 64, "status": "ok",
                 "ops": {"GET": {"tps": 1.5, "p50_us": float("nan")}}}]}


def test_round_trip_and_nan_becomes_null(tmp_path):
    p = tmp_path / "r.vtrace"
    recfmt.write(p, minimal_doc())
    doc = recfmt.read(p)
    assert doc["label"] == "x" and doc["runs"][0]["ops"]["GET"]["p50_us"] is None
    assert p.read_bytes().startswith(b"VALKEYTRACE\nformat %d\n" % recfmt.FORMAT_VERSION)


def test_failed_write_keeps_previous_file(tmp_path, monkeypatch):
    p = tmp_path / "r.vtrace"
    recfmt.write(p, minimal_doc())
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(recfmt.os, "replace", boom)
    with pytest.raises(VTError, match="No space left"):
        recfmt.write(p, dict(minimal_doc(), label="y"))
    assert p.read_bytes() == before
    assert [f.name for f in tmp_path.iterdir()] == ["r.vtrace"]  # temp file removed


def test_only_a_durable_write_fsyncs(tmp_path, monkeypatch):
    """Checkpoints (durable=False) are not fsynced: a traced `appendfsync always` server shares the
    disk; the finished recording is."""
    calls = []
    real = recfmt.os.fsync
    monkeypatch.setattr(recfmt.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    p = tmp_path / "r.vtrace.partial"
    recfmt.write(p, minimal_doc(), durable=False)
    assert calls == [] and recfmt.read(p)["label"] == "x"
    recfmt.write(tmp_path / "r.vtrace", minimal_doc())
    assert len(calls) == 1


@pytest.mark.parametrize("content,match", [
    (b"", "empty"),
    (b"hello world", "bad magic"),
    (b'{"format": "valkeytrace-report"}', "JSON file"),
    (b"VALKEYTRACE\nformat 99\n", "newer"),
    (b"VALKEYTRACE\nformat x\n", "format version"),
    (b"VALKEYTRACE\n", "format line"),
    (b"VALKEYTRACE\nformat 1\nnot zlib", "does not decode"),
])
def test_malformed_files_are_refused_with_a_sentence(tmp_path, content, match):
    p = tmp_path / "bad.vtrace"
    p.write_bytes(content)
    with pytest.raises(RecordingError, match=match):
        recfmt.read(p)


def test_truncated_file(tmp_path):
    p = tmp_path / "r.vtrace"
    recfmt.write(p, minimal_doc())
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 10])
    with pytest.raises(RecordingError, match="truncated|corrupt"):
        recfmt.read(p)


def test_missing_and_directory(tmp_path):
    with pytest.raises(RecordingError, match="no such file"):
        recfmt.read(tmp_path / "nope.vtrace")
    with pytest.raises(RecordingError, match="directory"):
        recfmt.read(tmp_path)


def test_wrong_types_inside_are_refused(tmp_path):
    doc = minimal_doc()
    p = tmp_path / "r.vtrace"
    p.write_bytes(recfmt.MAGIC + b"format 1\n" + zlib.compress(json.dumps(doc).encode()))
    with pytest.raises(RecordingError, match="not valid JSON"):  # a NaN token: JSON has none
        recfmt.read(p)
    doc["runs"][0]["ops"]["GET"]["p50_us"] = 1.0
    doc["runs"][0]["value_size"] = "64"
    p.write_bytes(recfmt.MAGIC + b"format 1\n" + zlib.compress(json.dumps(doc).encode()))
    with pytest.raises(RecordingError, match=r"runs\[0\]\.value_size: expected int, got str"):
        recfmt.read(p)
    doc["runs"][0]["value_size"] = 64
    doc["settings"]["duration_s"] = "two"
    p.write_bytes(recfmt.MAGIC + b"format 1\n" + zlib.compress(json.dumps(doc).encode()))
    with pytest.raises(RecordingError, match=r"\(settings\.duration_s: expected float \| null, got str\)$"):
        recfmt.read(p)
