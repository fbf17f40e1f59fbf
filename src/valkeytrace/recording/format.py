"""The .vtrace recording file: writer and reader.

Layout:
    b"VALKEYTRACE\\n"              magic
    b"format 1\\n"                 format version (ASCII decimal)
    zlib-compressed UTF-8 JSON    the recording document (see docs/recording-format.md)

Format history:
    1  valkeytrace 0.1: first format. Document keys: format, version, label, complete,
       created, valkeytrace_version, argv, server, host, client, settings, warnings, runs[].

No pickle, ever: the document is JSON, and everything read from a file is size- and
type-checked before use. Writes are atomic (temporary file in the same directory + rename), so
an interrupted or failed write leaves any previous file untouched.
"""
from __future__ import annotations

import json
import os
import tempfile
import zlib
from pathlib import Path

from valkeytrace.errors import RecordingError, VTError

MAGIC = b"VALKEYTRACE\n"
FORMAT_VERSION = 1
DOCUMENT_FORMAT = "valkeytrace-recording"
MAX_FILE_BYTES = 1 << 30          # refuse absurd files before reading them
MAX_DOCUMENT_BYTES = 4 << 30      # bound on the decompressed JSON (zip-bomb guard)


def encode(doc: dict) -> bytes:
    payload = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return MAGIC + f"format {FORMAT_VERSION}\n".encode() + zlib.compress(payload, 6)


def write(path: str | os.PathLike, doc: dict) -> None:
    """Atomically write doc to path: the old file, if any, survives any failure."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise VTError(f"cannot write {path}: directory {directory} does not exist")
    data = encode(_clean(doc))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise VTError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a recording is an ordinary file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise VTError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def _clean(obj):
    """JSON has no NaN: store None instead."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def read(path: str | os.PathLike) -> dict:
    """Load and validate a recording; every failure is a RecordingError with a plain sentence."""
    path = Path(path)
    try:
        if path.is_dir():
            raise RecordingError(f"{path} is a directory, not a recording")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise RecordingError(f"{path} is {size} bytes: too large to be a valkeytrace recording")
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such file")
    except PermissionError:
        raise RecordingError(f"{path}: permission denied")
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read ({exc.strerror or exc})")
    return decode(data, str(path))


def decode(data: bytes, name: str = "recording") -> dict:
    if not data:
        raise RecordingError(f"{name} is empty (was the recording interrupted before its first write?)")
    if not data.startswith(MAGIC):
        if data.lstrip()[:1] in (b"{", b"["):
            raise RecordingError(f"{name} is a JSON file, not a valkeytrace recording "
                                 "(reports are made from .vtrace files)")
        raise RecordingError(f"{name} is not a valkeytrace recording (bad magic)")
    rest = data[len(MAGIC):]
    nl = rest.find(b"\n", 0, 32)
    if nl < 0 or not rest.startswith(b"format "):
        raise RecordingError(f"{name} is truncated or corrupt (no format line)")
    try:
        version = int(rest[len(b"format "):nl].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise RecordingError(f"{name} is corrupt (unreadable format version)")
    if version > FORMAT_VERSION:
        raise RecordingError(f"{name} uses recording format {version}, newer than this valkeytrace "
                             f"understands ({FORMAT_VERSION}); upgrade valkeytrace to read it")
    if version < 1:
        raise RecordingError(f"{name} has an unknown recording format version {version}")
    try:
        d = zlib.decompressobj()
        payload = d.decompress(rest[nl + 1:], MAX_DOCUMENT_BYTES)
        if d.unconsumed_tail:
            raise RecordingError(f"{name} expands beyond {MAX_DOCUMENT_BYTES} bytes; refusing it")
        if not d.eof:
            raise RecordingError(f"{name} is truncated (the compressed document ends early)")
    except zlib.error:
        raise RecordingError(f"{name} is corrupt (compressed document does not decode)")
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise RecordingError(f"{name} is corrupt (its document is not valid JSON)")
    return validate(doc, name)


def validate(doc, name: str = "recording") -> dict:
    """Every field reports use, type- and range-checked (recording/schema.py)."""
    from valkeytrace.recording.schema import validate_document

    return validate_document(doc, name)
