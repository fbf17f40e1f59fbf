"""durability_check.AckedWrites: every run's file read, each run's part said, and a run whose file could not be
read never passed over (files the test writes itself)."""
import numpy as np

from valkeytrace.recording.model import DurabilityCheck
from valkeytrace.reporters.memory_words import durability_sentence
from valkeytrace.workload import durability_check as dc


def test_every_runs_file_is_folded_in_and_a_missing_or_short_one_is_unread(tmp_path):
    acked = dc.AckedWrites(4)
    try:
        acked.begin_run()
        first = acked.next_path()
        dc.write_kept(first, 5, np.array([3, 0, 9, 0], dtype=np.uint64))
        acked.begin_run()
        acked.next_path()  # its client never wrote it (killed)
        acked.begin_run()
        short = acked.next_path()
        np.zeros(3, dtype=np.uint64).tofile(short)  # cut short
        acked.begin_run()
        last = acked.next_path()
        dc.write_kept(last, 2, np.array([1, 4, 0, 0], dtype=np.uint64))
        acked.merge(first)
        acked.collect()
        assert acked.latest.tolist() == [3, 4, 9, 0] and acked.writes == 7
        parts = acked.parts()
        assert [(p["run"], p["writes_acked"], p["keys"]) for p in parts] == [(0, 5, 2), (1, 0, 0), (2, 0, 0), (3, 2, 2)]
        assert [("unread" in p) for p in parts] == [False, True, True, False], parts
        assert "runs[1]" in (acked.unread() or "") and "runs[2]" in (acked.unread() or "")
        check = dc.verify("valkey-server", str(tmp_path / "gone"), {}, acked)  # no AOF either: both said
        assert "no AOF directory" in check["error"] and "runs[1]" in check["error"], check
    finally:
        acked.close()


def test_a_loss_found_is_said_even_when_a_run_was_unread():
    both = DurabilityCheck(acked=10, acked_missing=2, error="the acknowledged writes of runs[1] could not be read")
    said = durability_sentence("x", both)
    assert said.startswith("x: 2 of 10 acknowledged writes missing") and "runs[1]" in said
    assert "could not run" in durability_sentence("x", DurabilityCheck(acked=10, error="runs[1] unread"))


def test_the_cut_comes_from_each_runs_file_a_failed_last_runs_too():
    """A failed last SET run's acks are merged: its cut (in its file) is the one the states are built at, not the
    previous run's; a run that acknowledged writes and never reached its window has none: an error, not silence."""
    acked = dc.AckedWrites(3)
    acked.cut_at = 0.8
    try:
        acked.begin_run()
        first = acked.next_path()
        dc.write_kept(first, 1, np.array([5, 0, 0], dtype=np.uint64), (100, 900))
        acked.begin_run()
        failed = acked.next_path()  # failed mid-window: no result, its file has its cut
        dc.write_kept(failed, 2, np.array([0, 7, 8], dtype=np.uint64), (200, 1900))
        acked.merge(first)
        assert acked.cut == (100, 900)
        acked.merge(failed)
        assert acked.cut == (200, 1900) and acked.uncut() is None
        acked.begin_run()
        early = acked.next_path()  # failed before its window began: acks, no cut
        dc.write_kept(early, 1, np.array([0, 0, 9], dtype=np.uint64))
        acked.merge(early)
        assert acked.cut == (200, 1900) and "runs[2]" in (acked.uncut() or "")
    finally:
        acked.close()


def test_the_table_keeps_a_loss_found_when_the_check_has_an_error():
    """export --table agrees with the sentence: an error with a loss found in what could be read keeps the
    figures; an error with none found blanks them; the method is a column."""
    from valkeytrace.analysis import fleet

    lossy = DurabilityCheck(method="power-cut", acked=10, acked_missing=2, error="replica 1: a state did not load")
    assert fleet._durability(lossy) == {"durability_method": "power-cut", "durability_acked": 10,
                                        "durability_missing": 2, "durability_error": lossy.error}
    blind = DurabilityCheck(method="kill", acked=10, error="runs[1] unread")
    got = fleet._durability(blind)
    assert got["durability_method"] == "kill" and got["durability_acked"] is None and got["durability_missing"] is None
    assert "durability_method" in fleet.COLUMNS
