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


def test_a_created_file_on_a_reused_inode_starts_at_nothing():
    """The reviewer's case: an AOF rewrite deletes the old incr file (inode 7, synced at 1000 B) and a new one
    takes inode 7; it is never synced, its directory is: none of its 500 bytes are durable."""
    f = [boundary.FileEntry("d/new.incr.aof", 7, DIR, 500)]
    t = _trace((10, 7, 1000, B, 1, b""), (20, 7, 1, E, 1, b""),   # the old file on inode 7 synced at 1000 B
               (30, 7, DIR, C, 1, b""),                              # deleted; a new file created on inode 7
               (40, DIR, 0, B, 1, b""), (50, DIR, 1, E, 1, b""))    # its directory synced, the file never
    assert boundary.boundaries(t, f, 99) == {"d/new.incr.aof": 0}
    base = boundary.Trace(np.array([(30, 7, DIR, C, 1, b"")], dtype=boundary.EVENT), {7: 1000})
    assert boundary.boundaries(base, f, 99) == {"d/new.incr.aof": None}  # nor does the baseline count


def test_torn_cuts_stop_at_the_size_the_file_had_reached_by_the_cut():
    f = [boundary.FileEntry("x.aof", 1, DIR, 5000)]
    t = _trace((10, 1, 1000, B, 1, b""), (20, 1, 1, E, 1, b""), (30, 1, 1400, B, 2, b""))  # a sync under way at the cut
    played = boundary.replay(t, 35)
    assert boundary.kept_at(played, f) == {"x.aof": 1000} and boundary.reached_at(played, f) == {"x.aof": 1400}
    st = powercut.states(f, boundary.kept_at(played, f), True, random.Random(1), boundary.reached_at(played, f))
    assert len(st) == 1 + powercut.TORN_CUTS and all(1000 < s["x.aof"] < 1400 for s, t in st[1:])


def test_the_file_system_is_the_longest_mount_point_that_holds_the_path(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
                    "30 22 0:5 / /data rw shared:2 - xfs /dev/sdb rw\n"
                    "31 22 0:6 / /data2 rw shared:3 - tmpfs tmpfs rw\n"
                    "32 30 0:7 / /data/my\\040disk rw shared:4 - btrfs /dev/sdc rw\n")
    assert powercut.fs_type("/data/aof", str(info)) == "xfs"
    assert powercut.fs_type("/data2", str(info)) == "tmpfs"
    assert powercut.fs_type("/data20/x", str(info)) == "ext4"
    assert powercut.fs_type("/data/my disk/a", str(info)) == "btrfs"
    assert powercut.fs_type("/x", str(tmp_path / "none")) is None


def _acked(tmp_path, cut=(100, 900)):
    from valkeytrace.workload import durability_check as dc

    acked = dc.AckedWrites(2)
    acked.cut_at = 0.8
    acked.begin_run()
    dc.write_kept(acked.next_path(), 1, np.array([5, 0], dtype=np.uint64), cut)
    acked.begin_run()
    acked.next_path()  # a run whose file was never written: unread
    acked.collect()
    assert acked.cut == cut
    return acked


def test_a_failing_replica_keeps_the_primarys_states_and_the_unread_note(tmp_path, monkeypatch):
    from valkeytrace.recording.model import CutState

    pc = powercut.PowerCut("shim", torn=False)
    pc.nodes.append(powercut.Node("replica 1"))
    acked = _acked(tmp_path)

    def cut_node(pc_, node, binary, cut_ns, latest, torn):
        if node.label == "primary":
            return powercut._NodeCut([CutState(kept={"a": 1}, acked=1, acked_missing=1, examples=[])], [], "shim", 5)
        raise powercut._Failed("replica 1: a state did not load: boom")
    monkeypatch.setattr(powercut, "_cut_node", cut_node)
    try:
        got = powercut.verify(pc, "valkey-server", acked)
    finally:
        pc.close()
        acked.close()
    assert got["acked"] == 1 and got["acked_missing"] == 1 and len(got["states"]) == 1, got
    assert "replica 1: a state did not load" in got["error"] and "runs[1]" in got["error"], got
    assert "replicas" not in got


def test_a_listing_that_fails_is_the_nodes_error_not_an_escape(tmp_path, monkeypatch):
    pc = powercut.PowerCut("shim", torn=False)
    acked = _acked(tmp_path)

    def refuse(*a):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(boundary, "listing", refuse)
    try:
        got = powercut.verify(pc, "valkey-server", acked)
    finally:
        pc.close()
        acked.close()
    assert "primary: its data directory could not be listed" in got["error"], got


def test_a_backend_that_saw_no_sync_while_a_file_grew_is_not_the_boundary():
    f = [boundary.FileEntry("x.aof", 1, DIR, 900)]
    blind = boundary.Trace(np.zeros(0, dtype=boundary.EVENT), {1: 100})
    assert "x.aof grew past its baseline" in (powercut._backend_fault(blind, f, boundary.replay(blind, 99)) or "")
    still = boundary.Trace(np.zeros(0, dtype=boundary.EVENT), {1: 900})
    assert powercut._backend_fault(still, f, boundary.replay(still, 99)) is None
