"""recording/document.py owns the document: its version is the container's, a version-1 file still
loads (marked upgraded), a newer one is refused, the builders keep to the declared keys, and
docs/recording-format.md describes every declared key."""
import json
import re
import zlib
from pathlib import Path

import pytest

from valkeytrace.errors import RecordingError
from valkeytrace.recording import document
from valkeytrace.recording import format as recfmt

DOCS = Path(__file__).resolve().parents[2] / "docs" / "recording-format.md"
from valkeytrace.recording import model  # noqa: E402
from valkeytrace.recording.model import TYPES  # noqa: E402  (every record the model declares)
from valkeytrace.workload.parse import ClientReport, Latency  # noqa: E402


def _doc(version):
    return {"format": document.DOCUMENT_FORMAT, "version": version, "label": "x", "complete": True, "runs": []}


def _container(doc, fmt):
    return recfmt.MAGIC + b"format %d\n" % fmt + zlib.compress(json.dumps(doc).encode())


def test_the_container_and_the_document_share_one_version():
    assert recfmt.FORMAT_VERSION == document.VERSION == 2
    assert recfmt.encode(_doc(document.VERSION)).startswith(b"VALKEYTRACE\nformat 2\n")


def test_a_version_1_document_loads_and_says_it_was_upgraded():
    doc = recfmt.decode(_container(_doc(1), 1))
    assert doc["version"] == document.VERSION and doc["upgraded_from"] == 1


def test_a_newer_document_is_refused_in_one_sentence():
    with pytest.raises(RecordingError, match="newer than this valkeytrace"):
        recfmt.decode(_container(_doc(3), 3))
    with pytest.raises(RecordingError, match="version: out of range"):
        recfmt.decode(_container(_doc(3), 2))  # a container that lies about its document


def test_new_document_and_finish():
    doc = document.new_document(label="l", server={}, host={}, client=None, settings={}, emulation=None,
                                warnings=["w"])
    assert set(doc) <= set(model.fields(model.Document))
    assert doc["version"] == document.VERSION and doc["complete"] is False
    run = document.new_run(doc, "read-heavy", 64, 1, None)
    assert "fsync_extra_delay_ns" not in run and doc["runs"] == [run]
    run["status"] = "ok"
    document.finish(doc, interrupted=False, tracer={"backend": "none"})
    assert doc["complete"] is True and doc["ended"]
    document.new_run(doc, "write-only", 64, 1, 0)["status"] = "failed"
    document.finish(doc, interrupted=False, tracer={"backend": "none"})
    assert doc["complete"] is False
    recfmt.decode(recfmt.encode(doc))  # what the builders make, the schema accepts


def test_op_record_keeps_to_the_declared_keys():
    report = ClientReport(test="GET", tps=10.0, clients=2, latency_ms=Latency(1.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    op = document.op_record(report, "measured")
    assert set(op) <= set(model.fields(model.Op)) and op["p99_us"] == 1000.0
    bg = document.background_op(clients=8, tps=5.0, mean_ms=None, samples=3, progress=[], command=["x"])
    assert set(bg) <= set(model.fields(model.Op)) and bg["mean_us"] is None


def test_server_window_refuses_undeclared_keys():
    t = document.thread_record(11, "bio_aof", "bio_aof")
    w = document.server_window(backend="shim", window_ns=1, pid=10, threads=[t, document.thread_record(10, "v", "main")],
                               lost_events=0, blocked_timeline={"events": []}, probe={}, hist_buckets=1)
    assert [x["role"] for x in w["threads"]] == ["main", "bio_aof"]
    with pytest.raises(TypeError, match="not a server window key"):
        document.server_window(backend="shim", window_ns=1, pid=1, threads=[], lost_events=0,
                               blocked_timeline={}, probe={}, surprise=1)


@pytest.mark.parametrize("typed", TYPES, ids=lambda t: t.__name__)
def test_docs_describe_every_declared_key(typed):
    text = DOCS.read_text()
    described = set(re.findall(r"`([a-z_0-9]+)`", text))
    missing = sorted(set(model.fields(typed)) - described)
    assert not missing, f"docs/recording-format.md does not describe {typed.__name__} keys: {missing}"
