"""The .vtrace recording file: writer and reader.

Layout:
    b"VALKEYTRACE\\n"              magic
    b"format 2\\n"                 format version (ASCII decimal): the document's version
    zlib-compressed UTF-8 JSON    the recording document (see docs/recording-format.md)

The container has not changed since format 1; the version history is the document's
(recording/document.py, which also owns the document's shape).

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

import msgspec

from valkeytrace.errors import RecordingError, VTError
from valkeytrace.recording.document import OLDEST_READABLE, upgrade
from valkeytrace.recording.document import VERSION as FORMAT_VERSION

MAGIC = b"VALKEYTRACE\n"
MAX_FILE_BYTES = 1 << 30          # refuse absurd files before reading them
MAX_DOCUMENT_BYTES = 4 << 30      # bound on the decompressed JSON (zip-bomb guard)
ZLIB_LEVEL = 6        # zlib level of a finished recording
CHECKPOINT_LEVEL = 1  # and of the checkpoints written between windows, while the server is traced:
                      # ~3x faster than 6 on a window's blocked timeline, ~15% larger


def _json(obj) -> bytes:
    """obj as compact JSON (UTF-8), a NaN or an infinity as null."""
    try:  # msgspec: ~5x the stdlib's speed on a window's blocked timeline, and bytes at once (the
        # tracer's own CPU and memory at each checkpoint); it writes a NaN or an infinity as null, as _clean
        return msgspec.json.encode(obj)
    except (TypeError, ValueError, msgspec.EncodeError):
        pass
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (ValueError, TypeError):  # a NaN, an infinity or a tuple key: only then walk it all
        return json.dumps(_clean(obj), separators=(",", ":"), allow_nan=False).encode("utf-8")


def _preamble() -> bytes:
    return MAGIC + f"format {FORMAT_VERSION}\n".encode()


def encode(doc: dict) -> bytes:
    """The recording's bytes: its runs encoded and compressed one by one (the whole document's JSON
    never held at once: the tracer's peak memory as it writes), then the other keys."""
    runs = doc.get("runs") or []
    z = zlib.compressobj(ZLIB_LEVEL)
    out = [_preamble(), z.compress(b'{"runs":[')]
    for i, run in enumerate(runs):
        out.append(z.compress((b"," if i else b"") + _json(run)))
    rest = _json({k: v for k, v in doc.items() if k != "runs"})
    out.append(z.compress(b"]" + (b"}" if rest == b"{}" else b"," + rest[1:])))
    out.append(z.flush())
    return b"".join(out)


class GrowingDocument:
    """Encodes one document again and again as its runs grow (a recording's checkpoints), in
    time proportional to what changed: each run that is final is serialised and compressed once,
    into a compressor whose state is kept; a checkpoint copies that state and adds only the rest
    of the document. The document is written as {"runs": [...], <the other keys>}: the same JSON
    object as encode() gives (key order aside), one zlib stream, read by read() like any other.
    Rewriting the whole recording at every window edge cost 50-120 ms of CPU a window, growing
    with the recording (docs/performance.md, the tracer's own cost)."""

    def __init__(self, level: int = CHECKPOINT_LEVEL):
        z = zlib.compressobj(level)
        # (compressor, its output so far, runs in it): one attribute, replaced in one store, so
        # that an exception anywhere in encode() (Ctrl-C, SIGTERM) leaves a consistent state; a
        # compressor advanced without its output kept corrupts every later write
        self._state = (z, [z.compress(b'{"runs":[')], 0)

    def encode(self, doc: dict, final_runs: int) -> bytes:
        """doc's runs[:final_runs] will not change again; the rest may."""
        runs = doc.get("runs") or []
        z, out, done = self._state
        if final_runs > len(runs) or final_runs < done:
            raise ValueError("final_runs must not shrink or exceed the runs")
        if final_runs > done:
            z, out = z.copy(), list(out)
            for i in range(done, final_runs):
                out.append(z.compress((b"," if i else b"") + _json(runs[i])))
            self._state = (z, out, final_runs)
        z = z.copy()
        open_runs = b"".join((b"," if i else b"") + _json(runs[i]) for i in range(final_runs, len(runs)))
        rest = _json({k: v for k, v in doc.items() if k != "runs"})
        tail = open_runs + b"]" + (b"}" if rest == b"{}" else b"," + rest[1:])
        return _preamble() + b"".join(out) + z.compress(tail) + z.flush()


def write(path: str | os.PathLike, doc: dict, data: bytes | None = None, durable: bool = True) -> None:
    """Atomically write doc (or its encoding, data, e.g. from GrowingDocument) to path: the old
    file, if any, survives any failure. durable=False: no fsync. A checkpoint written while a
    server is traced survives a crash of valkeytrace or of the server without it (the page cache
    keeps it), not a power cut; an fsync there is a second fsync stream on the disk that the traced
    server fsyncs its AOF to, at each window edge (GET p99 x1.14 against x1.06 without, for a
    300 KB file a second beside an `appendfsync always` server: docs/performance.md)."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise VTError(f"cannot write {path}: directory {directory} does not exist")
    if data is None:
        data = encode(doc)
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
            if durable:
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
    if isinstance(obj, msgspec.Raw):  # a part kept encoded (a window's blocked timeline)
        return json.loads(bytes(obj))
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
    if version < OLDEST_READABLE:
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
        doc = msgspec.json.decode(payload)  # ~30% faster than json.loads (benchmarks/recording_load.py)
    except (msgspec.DecodeError, UnicodeDecodeError, ValueError, RecursionError):
        raise RecordingError(f"{name} is corrupt (its document is not valid JSON)")
    return validate(upgrade(doc) if isinstance(doc, dict) else doc, name)


def validate(doc, name: str = "recording") -> dict:
    """Every field reports use, type- and range-checked (recording/schema.py)."""
    from valkeytrace.recording.schema import validate_document

    return validate_document(doc, name)


def is_recording(path: str | os.PathLike) -> bool:
    """The file at path starts as a recording does (whatever its name)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _refuse_inputs(output: str, inputs, flag: str) -> None:
    """output must be none of the command's inputs (the same file by any name)."""
    from valkeytrace.errors import VTUsageError

    for p in inputs:
        if os.path.exists(p) and os.path.exists(output) and os.path.samefile(p, output):
            raise VTUsageError(f"{flag} {output} is an input of this command: refusing to overwrite it")


def check_recording_output(output: str, force: bool, inputs: tuple = ()) -> None:
    """-o for a command that writes a recording (record, merge): a .vtrace name, none of the
    command's inputs, not an existing file without --force, in a writable directory; one line and
    a usage error otherwise."""
    from valkeytrace.errors import VTUsageError

    if not output.endswith(".vtrace"):
        raise VTUsageError(f"-o {output}: a recording is written as a .vtrace file (e.g. -o run.vtrace)")
    _refuse_inputs(output, inputs, "-o")
    if os.path.lexists(output) and not force:
        raise VTUsageError(f"-o {output} exists: refusing to overwrite it (--force replaces it)")
    outdir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(outdir):
        raise VTUsageError(f"-o {output}: directory {outdir} does not exist")
    if not os.access(outdir, os.W_OK):
        raise VTUsageError(f"-o {output}: directory {outdir} is not writable")


def refuse_overwrite(output: str, inputs: list[str], flag: str = "-o") -> None:
    """A command's output path must be none of its inputs and no recording: one line and a usage
    error otherwise (`report a.vtrace -o a.vtrace` replaced the recording with its report)."""
    from valkeytrace.errors import VTUsageError

    out = os.path.realpath(output)
    _refuse_inputs(output, inputs, flag)
    if out.endswith(".vtrace") or is_recording(out):
        raise VTUsageError(f"{flag} {output} is {'a recording' if is_recording(out) else 'a .vtrace path'}: "
                           "refusing to write a report over it (give another file name)")
