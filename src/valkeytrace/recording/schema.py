"""Validation of a loaded recording against its declared model (recording/model.py, by msgspec):
every field a report, plot or export reads is type- and range-checked, so that a loaded recording
renders or is refused with one sentence naming the field (RecordingError), never crashes a
reporter. What a type cannot say is checked here after it: a histogram's buckets add up to its
count, a window's request columns are as long as each other. Then the optional members reports
read are normalised (absent or null: {} or [])."""
from __future__ import annotations

import re

import msgspec

from valkeytrace.errors import RecordingError
from valkeytrace.recording.document import DOCUMENT_FORMAT, OLDEST_READABLE, VERSION
from valkeytrace.recording.model import Document, _plain

MAX_ITEMS = 10_000_000  # no list in a recording is longer (events, distributions, runs)
_AT = re.compile(r"^(?P<what>.*?) - at `\$(?P<path>[^`]*)`$", re.S)


def _fail(name: str, path: str, what: str):
    raise RecordingError(f"{name} is corrupt ({path}: {what})")


def _refusal(name: str, exc: msgspec.ValidationError):
    m = _AT.match(str(exc))
    what, path = (m["what"], m["path"].lstrip(".")) if m else (str(exc), "document")
    what = what.replace("`", "")
    _fail(name, path or "document", what[:1].lower() + what[1:])


def validate_document(doc, name: str = "recording") -> dict:
    if not isinstance(doc, dict):
        _fail(name, "document", "expected an object")
    if doc.get("format") != DOCUMENT_FORMAT:
        _fail(name, "format", f"not {DOCUMENT_FORMAT}")
    v = doc.get("version")
    if isinstance(v, bool) or not isinstance(v, int) or not OLDEST_READABLE <= v <= VERSION:
        _fail(name, "version", "out of range")
    try:
        msgspec.convert(_plain(doc), Document)  # a null or an empty object reads as an absent key
    except msgspec.ValidationError as exc:
        _refusal(name, exc)
    except (OverflowError, RecursionError):
        _fail(name, "document", "a number or a nesting beyond what a recording holds")
    if len(doc["runs"]) > MAX_ITEMS:
        _fail(name, "runs", "too many items")
    _normalise(doc, name)
    return doc


def _sub(parent: dict, key: str, kind=dict):
    """An optional member: absent or null becomes {} (or []) in the document."""
    if parent.get(key) is None:
        parent[key] = kind()
    return parent[key]


def _normalise(doc: dict, name: str) -> None:
    _sub(doc, "warnings", list)
    for key in ("server", "settings", "client", "emulation"):
        _sub(doc, key)
    _sub(doc["client"], "placement")
    _sub(doc["emulation"], "fsync_delay")
    for i, run in enumerate(doc["runs"]):
        run["ops"] = {k: op for k, op in _sub(run, "ops").items() if op is not None}  # a null op: absent
        for op in run["ops"].values():
            _sub(op, "percentile_distribution", list)
            _sub(op, "progress", list)
        _sub(_sub(run, "server_view"), "latencystats")
        server = _optional_window(run, "server", f"runs[{i}].server", name)
        if server is not None:
            _optional_window(server, "shim", f"runs[{i}].server.shim", name)
        for k, w in enumerate(run.get("replicas") or ()):
            _window(w, f"runs[{i}].replicas[{k}]", name)


def _optional_window(parent: dict, key: str, path: str, name: str) -> dict | None:
    """An optional window, normalised; an empty object reads as absent, as the model read it above (else
    the members _window adds would make it a window without its figures)."""
    if parent.get(key) == {}:
        parent[key] = None
    if parent.get(key) is not None:
        _window(parent[key], path, name)
    return parent.get(key)


def _window(s: dict, path: str, name: str) -> None:
    for i, t in enumerate(_sub(s, "threads", list)):
        for call, h in _sub(t, "calls").items():
            if sum(n for _, n in h["buckets"]) != h["count"]:
                _fail(name, f"{path}.threads[{i}].calls.{call}", "bucket counts do not add up to count")
        _sub(t, "off_cpu_ns")
        _whole(_sub(t, "sched"), ("on_cpu_ns", "runqueue_ns"), f"{path}.threads[{i}].sched", name)
    _sub(_sub(s, "blocked_timeline"), "events", list)
    req = _whole(_sub(s, "requests"), ("offset_ns", "conn", "event", "tid"), f"{path}.requests", name)
    if req and len({len(req[k]) for k in ("offset_ns", "conn", "event", "tid")}) != 1:
        _fail(name, f"{path}.requests", "its columns offset_ns, conn, event and tid differ in length")
    _sub(s, "probe")
    _whole(_sub(s, "eventloop"), ("cycles", "duration_us"), f"{path}.eventloop", name)


def _whole(obj: dict, keys: tuple, path: str, name: str) -> dict:
    """An object that holds all of keys or none of them."""
    missing = [k for k in keys if obj.get(k) is None]
    if obj and missing:
        _fail(name, f"{path}.{missing[0]}", "missing")
    return obj
