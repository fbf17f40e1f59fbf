"""valkeytrace merge's pure parts (recording/merge.py): nodes matched by replication (one primary,
replicas of its id and port; anything else refused in one line), windows paired by overlap, and
the merged document: the replica's window moved onto the primary's clock by the given offset."""
import pytest

from valkeytrace.errors import VTUsageError
from valkeytrace.recording import merge
from valkeytrace.recording.model import decode


def _match(docs, names):
    return merge.match([decode(d) for d in docs], names)


def _doc(role, port, replid, link="up", windows=((100.0, 104.0),), primary_port=None, start=10**9):
    repl = {"role": role, "master_replid": replid}
    if role == "slave":
        repl.update(master_port=primary_port, master_link_status=link)
    runs = [{"workload": "none", "value_size": 64, "status": "ok", "window_start": a, "window_end": b,
             "server": {"window_ns": int((b - a) * 1e9), "start_mono_ns": start + i}} for i, (a, b) in enumerate(windows)]
    return {"format": "valkeytrace-recording", "version": 2, "label": f"n{port}", "server": {"pid": port, "port": port, "replication": repl}, "host": {}, "runs": runs}


def test_one_primary_and_its_replicas():
    p, r = _doc("master", 7001, "abc"), _doc("slave", 7002, "abc", primary_port=7001)
    assert _match([r, p], ["r", "p"]) == (1, [0])


@pytest.mark.parametrize("docs,words", [
    ([_doc("master", 1, "a"), _doc("master", 2, "b")], "one primary"),
    ([_doc("slave", 1, "a", primary_port=9), _doc("slave", 2, "a", primary_port=9)], "one primary"),
    ([_doc("master", 1, "a"), _doc("slave", 2, "zzz", primary_port=1)], "not a replica"),
    ([_doc("master", 1, "a"), _doc("slave", 2, "a", primary_port=3)], "not a replica"),
    ([{"format": "valkeytrace-recording", "version": 2, "label": "x", "server": {"port": 1},
       "runs": [{"workload": "none", "value_size": 64, "status": "ok", "server": {"window_ns": 1}}]}, _doc("master", 2, "a")],
     "role was not recorded"),
])
def test_what_is_not_one_system_is_refused(docs, words):
    with pytest.raises(VTUsageError, match=words):
        _match(docs, [f"d{i}.vtrace" for i in range(len(docs))])


def test_a_replica_whose_link_was_not_up_yet_is_matched_by_the_primary_listing_it():
    p = _doc("master", 7001, "abc")
    p["server"]["replication"]["slave0"] = {"ip": "127.0.0.1", "port": 7002, "state": "online"}
    r = _doc("slave", 7002, "its-own-id", link="down", primary_port=7001)
    assert _match([p, r], ["p", "r"]) == (0, [1])


def test_windows_paired_by_overlap_and_moved_onto_the_primary_clock():
    p = _doc("master", 1, "a", windows=((100.0, 104.0), (110.0, 114.0)), start=5 * 10**9)
    r = _doc("slave", 2, "a", windows=((109.5, 113.0), (99.0, 103.5)), primary_port=1, start=7 * 10**9)
    pairs = merge.pair_windows(decode(p), decode(r))
    assert pairs == [(0, 1), (1, 0)]
    out = merge.build(p, "p.vtrace", [merge.Joined(r, decode(r), "r.vtrace", pairs, 2 * 10**9, 1500, "replication exchange")])
    assert [n["role"] for n in out["nodes"]] == ["primary", "replica"]
    assert out["nodes"][1]["clock_offset_ns"] == 2 * 10**9 and out["nodes"][1]["clock_error_ns"] == 1500
    assert out["runs"][0]["replicas"][0]["start_mono_ns"] == 7 * 10**9 + 1 - 2 * 10**9
    assert out["merged_from"] == ["p.vtrace", "r.vtrace"]
    assert "replicas" not in p["runs"][0]  # the input untouched
