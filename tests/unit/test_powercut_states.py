"""The power cut's pure parts: the replay's rules for names (a directory fsync entered after the create or
rename, and returned, before the cut) and the states built from the boundaries (workload/boundary.py,
workload/powercut.py)."""
import random

import numpy as np

from valkeytrace.workload import boundary, powercut

B, E, C, R = boundary.SYNC_BEGIN, boundary.SYNC_END, boundary.CREATE, boundary.RENAME
DIR = 100


def _trace(*events):
    return boundary.Trace(np.array(list(events), dtype=boundary.EVENT), {DIR: 0})


def test_a_renamed_file_is_present_only_after_its_directory_sync_returned():
    f = [boundary.FileEntry("d/x.manifest", 7, DIR, 88)]
    t = _trace((10, 7, 88, B, 1, b""), (20, 7, 1, E, 1, b""),            # the file synced
               (30, 0, 0, R, 1, b"irdir/x.manifest"),                   # renamed into place (a path's tail)
               (40, DIR, 0, B, 1, b""), (50, DIR, 1, E, 1, b""))        # its directory synced
    assert boundary.boundaries(t, f, 35) == {"d/x.manifest": None}
    assert boundary.boundaries(t, f, 45) == {"d/x.manifest": None}     # the directory's sync not returned
    assert boundary.boundaries(t, f, 55) == {"d/x.manifest": 88}


def test_a_directory_sync_before_the_create_does_not_cover_it():
    f = [boundary.FileEntry("y.aof", 8, DIR, 10)]
    t = _trace((10, DIR, 0, B, 1, b""), (20, DIR, 1, E, 1, b""), (30, 8, DIR, C, 1, b""),
               (40, 8, 10, B, 1, b""), (50, 8, 1, E, 1, b""))
    assert boundary.boundaries(t, f, 99) == {"y.aof": None}


def test_a_file_that_stood_when_the_trace_began_is_present_at_its_baseline():
    f = [boundary.FileEntry("z.rdb", 9, DIR, 500)]
    t = boundary.Trace(np.zeros(0, dtype=boundary.EVENT), {9: 300})
    assert boundary.boundaries(t, f, 99) == {"z.rdb": 300}


def test_states_torn_between_the_boundary_and_the_end(tmp_path):
    files = [boundary.FileEntry("a/x.aof", 1, DIR, 1000), boundary.FileEntry("a/m", 2, DIR, 50),
             boundary.FileEntry("new.aof", 3, DIR, 30)]
    kept = {"a/x.aof": 600, "a/m": 50, "new.aof": None}
    st = powercut.states(files, kept, torn=True, rng=random.Random(3))
    assert st[0] == ({"a/x.aof": 600, "a/m": 50}, None)
    torn = st[1:]
    assert len(torn) == powercut.TORN_CUTS and all(t == "a/x.aof" for _, t in torn)
    assert all(600 < s["a/x.aof"] < 1000 and s["a/m"] == 50 and "new.aof" not in s for s, _ in torn)
    assert powercut.states(files, kept, torn=False, rng=random.Random(3)) == st[:1]
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.aof").write_bytes(bytes(range(256)) * 4)
    (src / "a" / "m").write_bytes(b"m" * 50)
    (src / "new.aof").write_bytes(b"n" * 30)
    powercut.build(str(src), str(dst), st[0][0])
    assert (dst / "a" / "x.aof").read_bytes() == (bytes(range(256)) * 4)[:600]
    assert (dst / "a" / "m").read_bytes() == b"m" * 50 and not (dst / "new.aof").exists()
