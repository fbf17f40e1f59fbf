"""record --verify-durability: nothing acknowledged lost, witnessed.

The open-loop client (csrc/vt_load.c) writes each SET's sequence into the value's first 16 hex digits: its
CLOCK_MONOTONIC ns plus the launch's epoch (AckedWrites.epoch: the wall clock minus CLOCK_MONOTONIC, taken
once), so a later value always carries a larger sequence, in every run of the launch, whatever the wall
clock does between them. Per key it keeps what the reload must hold at least: for each SET the server
acknowledged (+OK), its floor, the oldest of it and the SETs of that key in flight on other connections as it
was sent (the server runs a connection's requests in order and orders connections as it reads them: one
still unanswered on another connection may have run after it and be the value that stays); the largest
floor of the key's acknowledged SETs (csrc/vt_inflight.h). Each run's client writes those to a file of its
own, whether its run ended well or not (a server that dies mid-window drops exactly the writes acknowledged
just before); AckedWrites folds every run's in and says which runs contributed. After the launch's last
window the server is killed with SIGKILL (a crash: nothing drained, nothing flushed), a copy of its AOF
directory is loaded by a plain valkey-server (the same binary, no shim, on a port of its own, with the killed
server's appenddirname and appendfilename), and every key the clients saw acknowledged is read back: the
value there must carry that sequence or a later one. A key that is missing, or holds an earlier value, or a
value without a sequence (a write by someone else) is an acknowledged write lost. Overlapping writes make the
check weaker for their key (a reload holding the overlapping earlier write passes), never wrong. Nothing is
claimed when a run's file could not be read or the reload did not finish loading (`error`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass

import numpy as np

from valkeytrace.errors import VTError

BATCH = 1000      # keys per MGET
EXAMPLES = 5
LOAD_TIMEOUT_S = 60.0
CARRIED = ("appenddirname", "appendfilename")  # the killed server's settings its AOF is found by


HEAD = 3  # a run's file's header: the count, the cut's CLOCK_MONOTONIC ns and its sequence (0, 0: no cut)


def write_kept(path: str, count: int, per_key: np.ndarray, cut: tuple[int, int] | None = None) -> None:
    """A run's file: the count (acknowledged SETs, or reads), the run's cut (power-cut: the moment after which
    its acknowledgments were not kept, both clocks; none when its window never began), then one uint64 per key."""
    with open(path, "wb") as f:
        np.array([count, *(cut or (0, 0))], dtype=np.uint64).tofile(f)
        per_key.astype(np.uint64, copy=False).tofile(f)


def read_kept(path: str, keyspace: int) -> tuple[int, np.ndarray, tuple[int, int] | None] | str:
    """(count, per key, the run's cut or None) from a run's file, or why it cannot be read."""
    try:
        got = np.fromfile(path, dtype=np.uint64)
    except OSError as exc:
        return "its client ended before writing them" if isinstance(exc, FileNotFoundError) else str(exc)
    if got.size != keyspace + HEAD:
        return f"its client's file holds {got.size * 8} of {(keyspace + HEAD) * 8} bytes"
    return int(got[0]), got[HEAD:], (int(got[1]), int(got[2])) if got[1] else None


@dataclass
class RunPart:
    """One run's part (runs[].durability_check.runs[]): its index in runs[]."""
    run: int
    writes_acked: int = 0
    keys: int = 0
    unread: str | None = None  # why its acknowledged writes could not be read (then nothing is claimed)


class AckedWrites:
    """The launch's acknowledged SETs: each open-loop SET run writes its keys' floors to a file of its own
    (next_path, registered to `run`: the launch's current runs[] index, begin_run() as the recorder appends one:
    it appends every run); merge() folds it in (the largest per key), after the run whatever its end; collect()
    folds in any a run left."""

    def __init__(self, keyspace: int):
        self.keyspace = keyspace
        self.latest = np.zeros(keyspace, dtype=np.uint64)
        self.seen = np.zeros(keyspace, dtype=np.uint64)  # replica readers (--replica-get-clients): the latest read
        self.writes = 0
        self.epoch = time.time_ns() - time.monotonic_ns()  # every run's sequences on one clock that only rises
        self.run, self._begun = 0, 0
        self.runs: dict[int, RunPart] = {}
        self._files: dict[str, tuple[int, str]] = {}  # path -> (run, "latest" or "seen"), not yet merged
        self.cut_at = 0.0  # power-cut: the share of each SET window after which acks are not kept (workload/powercut.py)
        self.cut: tuple[int, int] | None = None  # the latest cut of the runs read: (CLOCK_MONOTONIC ns, the sequences' clock)
        self._uncut: list[int] = []  # power-cut: runs that acknowledged writes but carried no cut (their window never began)
        self.dir = tempfile.mkdtemp(prefix="valkeytrace-acked-")
        self._n = 0

    def begin_run(self) -> None:
        self.run, self._begun = self._begun, self._begun + 1

    def next_path(self, into: str = "latest") -> str:
        self._n += 1
        path = os.path.join(self.dir, f"run-{self._n}.u64")
        self._files[path] = (self.run, into)
        self.runs.setdefault(self.run, RunPart(self.run))
        return path

    def merge(self, path: str) -> None:
        """A run's file folded into `latest` (acknowledged) or `seen` (what replica readers read), or the run
        marked unread."""
        if path not in self._files:
            return
        run, into = self._files.pop(path)
        part, got = self.runs[run], read_kept(path, self.keyspace)
        if isinstance(got, str):
            part.unread = part.unread or (got if into == "latest" else f"its replica readers' file: {got}")
            return
        count, per_key, cut = got
        np.maximum(getattr(self, into), per_key, out=getattr(self, into))
        if into == "latest" and self.cut_at:
            if cut is not None:
                self.cut = max(self.cut or cut, cut)
            elif count:
                self._uncut.append(run)
        if into == "latest":
            part.writes_acked += count
            part.keys += int(np.count_nonzero(per_key))
            self.writes += count
        os.unlink(path)

    def collect(self) -> None:
        for path in list(self._files):
            self.merge(path)

    def parts(self) -> list[dict]:
        """runs[].durability_check.runs: each run's part, in order."""
        return [{k: v for k, v in asdict(r).items() if v is not None} for r in sorted(self.runs.values(), key=lambda r: r.run)]

    def unread(self) -> str | None:
        """Why some run's acknowledged writes could not be read, or None."""
        bad = [f"runs[{r.run}] ({r.unread})" for r in self.runs.values() if r.unread]
        return f"the acknowledged writes of {', '.join(bad)} could not be read: nothing is claimed" if bad else None

    def uncut(self) -> str | None:
        """power-cut: why some run's acknowledged writes have no cut to be checked at, or None."""
        bad = ", ".join(f"runs[{r}]" for r in sorted(set(self._uncut)))
        return (f"{bad} acknowledged writes but failed before its window began (no cut): they are compared against "
                "nothing, nothing is claimed") if bad else None

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _sequence(value: bytes | None) -> int | None:
    try:
        return int(value[:16], 16) if value is not None and len(value) >= 16 else None
    except ValueError:
        return None


def compare_acked(client, latest: np.ndarray) -> tuple[int, int, list[dict], int | None]:
    """(keys checked, missing, examples, the oldest missing key's floor) against a server that loaded the AOF: a
    key is missing when the reload lacks latest[k] and every later value of it."""
    keys = np.flatnonzero(latest)
    missing, examples, oldest = 0, [], None  # type: int, list[dict], int | None
    for i in range(0, keys.size, BATCH):
        chunk = keys[i:i + BATCH]
        values = client.mget([f"key:{int(k):012d}" for k in chunk])
        for k, v in zip(chunk, values):
            seq = _sequence(v)
            if seq is None or seq < int(latest[k]):
                missing += 1
                oldest = int(latest[k]) if oldest is None else min(oldest, int(latest[k]))
                if len(examples) < EXAMPLES:
                    examples.append({"key": f"key:{int(k):012d}", "at_least_sequence": int(latest[k]),
                                     "reloaded": None if v is None else (f"sequence {seq}" if seq is not None
                                                                        else "a value without a sequence")})
    return int(keys.size), missing, examples, oldest


def reload_settings(config: dict) -> dict[str, str]:
    """The killed server's settings its AOF is found by (CARRIED), from its config (CONFIG GET's)."""
    return {k: str(config[k]) for k in CARRIED if config.get(k)}


class _StillLoading(VTError):
    pass


def verify(binary: str, aof_dir: str, settings: dict[str, str], acked: AckedWrites) -> dict:
    """runs[].durability_check: the killed server's AOF (aof_dir/appenddirname) loaded by a plain server run with
    `settings` (reload_settings(): its appenddirname and appendfilename; anything else given is passed on too)."""
    from valkey.exceptions import ValkeyError

    acked.collect()
    dirname = settings.get("appenddirname") or "appendonlydir"
    method = (f"the server killed (SIGKILL) after the last window (or when it died); a copy of {dirname}/ loaded by a plain "
              f"{os.path.basename(binary)} (no shim) with its {', '.join(sorted(settings)) or 'default AOF settings'}; "
              "each key's acknowledged SETs looked up (every run's, one that failed too)")
    unread = acked.unread()
    out: dict = {"acked": 0, "acked_missing": 0, "writes_acked": acked.writes, "examples": [], "method": "kill",
                 "how": method, "runs": acked.parts(), **({"error": unread} if unread else {})}
    src = os.path.join(aof_dir, dirname)
    failed = None
    if not os.path.isdir(src):
        failed = f"no AOF directory at {src}"
    else:
        try:
            out.update(_reload(binary, src, {**settings, "appenddirname": dirname}, acked))
        except _StillLoading as exc:
            failed = str(exc)
        except (OSError, VTError, ValkeyError) as exc:
            failed = f"the reload failed: {exc}"
    return {**out, "error": "; ".join(filter(None, (failed, unread)))} if failed else out


def _reload(binary: str, src: str, settings: dict[str, str], acked: AckedWrites) -> dict:
    """A copy of src loaded by a plain server; the acknowledged (and replica-read) keys compared once it has
    loaded all of it (_StillLoading past LOAD_TIMEOUT_S: nothing compared)."""
    work = tempfile.mkdtemp(prefix="valkeytrace-reload-")
    try:
        shutil.copytree(src, os.path.join(work, os.path.basename(src)))
        with plain_server(binary, work, settings) as client:
            checked, missing, examples, _ = compare_acked(client, acked.latest)
            found: dict = {"acked": checked, "acked_missing": missing, "examples": examples}
            if acked.seen.any():
                seen, phantoms, phantom_examples, _ = compare_acked(client, acked.seen)
                found.update(replica_reads_checked=seen, phantom_reads=phantoms, phantom_examples=phantom_examples)
            return found
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def plain_server(binary: str, work: str, settings: dict[str, str]):
    """A plain server (no shim) on the data directory `work` with `settings` (reload_settings()'s), its client
    once it has loaded all of it (_StillLoading past LOAD_TIMEOUT_S); stopped on leaving."""
    from valkeytrace.server import process as srv

    server = srv.EmbeddedServer(appendfsync="always", binary=binary, io_threads=1, loading_is_ready=True,
                                server_config={**settings, "dir": work, "aof-load-truncated": "yes"}, env=_plain_env())
    try:
        client = srv.connect(server.host, server.port or 0, timeout=30.0)
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while int(client.info("persistence").get("loading", 0)):
            if time.monotonic() >= deadline:
                raise _StillLoading(f"the reload was still loading the AOF after {LOAD_TIMEOUT_S:g} s: nothing compared")
            time.sleep(0.05)
        yield client
    finally:
        server.stop()


def _plain_env() -> dict:
    """The environment without valkeytrace's shim or its variables: a plain server."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("VALKEYTRACE_")}
