"""record --verify-durability: nothing acknowledged lost, witnessed.

The open-loop client (csrc/vt_load.c) writes each SET's sequence (the wall clock's ns, strictly rising)
into the value's first 16 hex digits and keeps, per key, what the reload must hold at least: the latest
SET the server acknowledged (+OK) or, when other SETs of that key were in flight on other connections as it
was sent, the oldest of those (the server orders connections as it reads them: one sent earlier may have
run later and be the value that stays). After the launch's last window the server is killed with SIGKILL (a crash: nothing
drained, nothing flushed), a copy of its AOF directory is loaded by a plain valkey-server (the same
binary, no shim, on a port of its own), and every key the clients saw acknowledged is read back: the
value there must carry that sequence or a later one. A key that is missing, or holds an earlier value,
or a value without a sequence (a write by someone else) is an acknowledged write lost. Overlapping writes
make the check weaker for their key (a reload holding the overlapping earlier write passes), never wrong.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np

from valkeytrace.errors import VTError

BATCH = 1000      # keys per MGET
EXAMPLES = 5
LOAD_TIMEOUT_S = 60.0


class AckedWrites:
    """The launch's acknowledged SETs: each open-loop SET run writes its keys' latest sequences to a file
    of its own (next_path); merge() folds it in (the latest per key)."""

    def __init__(self, keyspace: int):
        self.keyspace = keyspace
        self.latest = np.zeros(keyspace, dtype=np.uint64)
        self.seen = np.zeros(keyspace, dtype=np.uint64)  # replica readers (--replica-get-clients): the latest read
        self.writes = 0
        self.cut_at = 0.0  # power-cut: the share of each SET window after which acks are not kept (workload/powercut.py)
        self.cut: tuple[int, int] | None = None  # the last run's cut: (CLOCK_MONOTONIC ns, the sequences' clock)
        self.dir = tempfile.mkdtemp(prefix="valkeytrace-acked-")
        self._n = 0

    def next_path(self) -> str:
        self._n += 1
        return os.path.join(self.dir, f"run-{self._n}.u64")

    def merge(self, path: str, writes: int, into: str = "latest") -> None:
        """A run's file folded into `latest` (acknowledged) or `seen` (what replica readers read)."""
        try:
            got = np.fromfile(path, dtype=np.uint64)
        except OSError:
            return
        if got.size == self.keyspace:
            np.maximum(getattr(self, into), got, out=getattr(self, into))
            self.writes += writes
        os.unlink(path)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _sequence(value: bytes | None) -> int | None:
    try:
        return int(value[:16], 16) if value is not None and len(value) >= 16 else None
    except ValueError:
        return None


def _compare(client, latest: np.ndarray) -> tuple[int, int, list[dict]]:
    """(keys checked, missing, examples) against a server that loaded the AOF: a key is missing when the
    reload lacks latest[k] and every later value of it."""
    keys = np.flatnonzero(latest)
    missing, examples = 0, []  # type: int, list[dict]
    for i in range(0, keys.size, BATCH):
        chunk = keys[i:i + BATCH]
        values = client.mget([f"key:{int(k):012d}" for k in chunk])
        for k, v in zip(chunk, values):
            seq = _sequence(v)
            if seq is None or seq < int(latest[k]):
                missing += 1
                if len(examples) < EXAMPLES:
                    examples.append({"key": f"key:{int(k):012d}", "at_least_sequence": int(latest[k]),
                                     "reloaded": None if v is None else (f"sequence {seq}" if seq is not None
                                                                        else "a value without a sequence")})
    return int(keys.size), missing, examples


def verify(binary: str, aof_dir: str, appenddirname: str, acked: AckedWrites) -> dict:
    """runs[].durability_check: the killed server's AOF (aof_dir/appenddirname) loaded by a plain server."""
    from valkeytrace.server import process as srv

    method = (f"the server killed (SIGKILL) after the last window; a copy of {appenddirname}/ loaded by a plain "
              f"{os.path.basename(binary)} (no shim); each key's latest acknowledged SET looked up")
    out: dict = {"acked": 0, "acked_missing": 0, "writes_acked": acked.writes, "examples": [], "method": "kill",
                 "how": method}
    src = os.path.join(aof_dir, appenddirname)
    if not os.path.isdir(src):
        return {**out, "error": f"no AOF directory at {src}"}
    work = tempfile.mkdtemp(prefix="valkeytrace-reload-")
    try:
        shutil.copytree(src, os.path.join(work, appenddirname))
        server = srv.EmbeddedServer(appendfsync="always", binary=binary, io_threads=1, ready_timeout_s=LOAD_TIMEOUT_S,
                                    server_config={"dir": work, "appenddirname": appenddirname,
                                                   "aof-load-truncated": "yes"}, env=_plain_env())
        try:
            client = srv.connect(server.host, server.port or 0, timeout=30.0)
            deadline = time.monotonic() + LOAD_TIMEOUT_S
            while int(client.info("persistence").get("loading", 0)) and time.monotonic() < deadline:
                time.sleep(0.05)
            checked, missing, examples = _compare(client, acked.latest)
            seen, phantoms, phantom_examples = _compare(client, acked.seen) if acked.seen.any() else (0, 0, [])
        finally:
            server.stop()
    except (OSError, VTError) as exc:
        return {**out, "error": f"the reload failed: {exc}"}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {**out, "acked": checked, "acked_missing": missing, "examples": examples,
            **({"replica_reads_checked": seen, "phantom_reads": phantoms, "phantom_examples": phantom_examples}
               if acked.seen.any() else {})}


def _plain_env() -> dict:
    """The environment without valkeytrace's shim or its variables: a plain server."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("VALKEYTRACE_")}
