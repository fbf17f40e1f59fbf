"""recording.format.GrowingDocument: each checkpoint of a growing recording reads back as the
whole document encoded at once would, while final runs are encoded only once."""
import pytest

from valkeytrace.recording import format as recfmt


def a_run(i, status="ok"):
    return {"workload": "read-heavy", "value_size": 64, "repeat": i, "status": status,
            "ops": {"GET": {"tps": 1000.0 + i, "p50_us": float("nan")}}}


def doc_with(runs):
    return {"format": "valkeytrace-recording", "version": 1, "label": "x", "complete": False,
            "server": {}, "settings": {}, "warnings": [], "runs": runs}


def test_each_checkpoint_reads_as_the_whole_document():
    enc = recfmt.GrowingDocument()
    doc = doc_with([])
    assert recfmt.decode(enc.encode(doc, 0)) == recfmt.decode(recfmt.encode(doc))
    for i in range(4):
        doc["runs"].append(a_run(i, status="running"))
        assert recfmt.decode(enc.encode(doc, i)) == recfmt.decode(recfmt.encode(doc))  # running: re-encoded
        doc["runs"][-1]["status"] = "ok"
        doc["warnings"].append(f"w{i}")
        got = recfmt.decode(enc.encode(doc, i + 1))
        assert got == recfmt.decode(recfmt.encode(doc))
        assert got["runs"][-1]["ops"]["GET"]["p50_us"] is None  # NaN stored as null
    assert [r["repeat"] for r in recfmt.decode(enc.encode(doc, 4))["runs"]] == [0, 1, 2, 3]


def test_a_final_run_is_not_encoded_again():
    enc = recfmt.GrowingDocument()
    doc = doc_with([a_run(0)])
    enc.encode(doc, 1)
    doc["runs"][0]["status"] = "failed"
    assert recfmt.decode(enc.encode(doc, 1))["runs"][0]["status"] == "ok"


def test_final_runs_cannot_shrink_or_exceed_the_runs():
    enc = recfmt.GrowingDocument()
    doc = doc_with([a_run(0), a_run(1)])
    enc.encode(doc, 2)
    with pytest.raises(ValueError):
        enc.encode(doc, 1)
    with pytest.raises(ValueError):
        enc.encode(doc, 3)


def test_an_interrupt_inside_encode_leaves_later_writes_whole(monkeypatch):
    """A SIGTERM (KeyboardInterrupt) landing while a run is being added used to advance the
    compressor without keeping its output: every later checkpoint, and the final file, did not
    decode ("invalid distance too far back")."""
    enc = recfmt.GrowingDocument()
    doc = doc_with([a_run(0), a_run(1)])
    enc.encode(doc, 1)
    real, calls = recfmt._json, []

    def interrupted(obj):
        calls.append(obj)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(obj)
    doc["runs"].append(a_run(2))
    monkeypatch.setattr(recfmt, "_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        enc.encode(doc, 3)  # run 1 encoded and compressed, run 2 interrupted
    monkeypatch.setattr(recfmt, "_json", real)
    assert recfmt.decode(enc.encode(doc, 3)) == recfmt.decode(recfmt.encode(doc))
