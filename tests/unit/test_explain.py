"""The attribution model and the explanation entries, on synthetic cells with known answers."""
import pytest

from valkeytrace.analysis import explain
from valkeytrace.analysis.tables import compare, summarize


def main(fsync_pct, aof_pct=0.0, tw_p50=None, wait_cpu=0.0):
    on = 100 - fsync_pct - aof_pct - wait_cpu
    return {"wall_ms": 1000.0, "blocked_in_fsync_pct": fsync_pct, "blocked_in_aof_write_pct": aof_pct,
            "on_cpu_pct": on, "waiting_for_cpu_pct": wait_cpu, "idle_pct": 0.0, "other_blocked_pct": 0.0,
            "fdatasync_count": 240 if fsync_pct else 0, "fdatasync_p50_us": 4100.0 if fsync_pct else None,
            "loop_iteration_tw_p50_us": tw_p50}


def test_share_is_one_when_the_whole_change_is_main_thread_fsync():
    # baseline: 10 ms of which 90% is main-thread fsync; candidate: 1 ms, none of it
    assert explain.explained_share(10_000, 1_000, main(90), main(0)) == pytest.approx(1.0)


def test_share_is_partial_when_other_causes_moved_too():
    # 9 ms of the 10 ms -> 1 ms change is predicted... only 4.5 ms if the baseline was 45% fsync
    share = explain.explained_share(10_000, 1_000, main(45), main(0))
    assert share == pytest.approx(4_500 / 9_000)


def test_share_is_zero_when_server_side_moves_the_other_way_or_nothing_changed():
    assert explain.explained_share(1_000, 10_000, main(50), main(0)) == 0.0
    assert explain.explained_share(10_000, 10_050, main(90), main(0)) == 0.0


def test_aof_write_blocking_counts_as_durability_work():
    assert explain.durability_fraction(main(40, aof_pct=10)) == pytest.approx(0.5)


def _doc(label, fsync, tps, p50, server_main, roles):
    threads = [{"role": r, "names": [r], "threads": 1,
                "fdatasync": {"count": n, "p50_us": 4100.0 if n else None, "p99_us": None, "max_us": None,
                              "total_ms": 0.0, "bytes": 0},
                "fsync": {"count": 0, "p50_us": None}} for r, n in roles.items()]
    run = {"workload": "read-heavy", "value_size": 64, "repeat": 1, "status": "ok",
           "ops": {"GET": {"role": "measured", "clients": 50, "tps": tps, "p50_us": p50, "p95_us": p50 * 1.1,
                           "p99_us": p50 * 1.2, "mean_us": p50}}}
    doc = {"format": "valkeytrace-recording", "label": label, "server": {"appendfsync": fsync},
           "settings": {}, "runs": [run], "complete": True}
    cells = summarize(doc)
    cells[0].server = {"main_thread": server_main, "threads": threads}
    return doc, cells


def test_compare_entry_names_threads_and_calls():
    bdoc, bcells = _doc("fsync-always", "always", 5000, 10_000, main(88, tw_p50=4200), {"main": 240, "bio_aof": 0})
    cdoc, ccells = _doc("fsync-everysec", "everysec", 54000, 920, main(0, tw_p50=310), {"main": 0, "bio_aof": 1})
    cmp = compare(bcells, ccells)
    entries = explain.explain_compare(bcells, ccells, cmp, bdoc, cdoc)
    p50 = [e for e in entries if e["metric"] == "p50_us"][0]
    assert p50["op"] == "GET" and p50["value_size"] == 64
    assert "main thread spent 88%" in p50["claim"] and "fdatasync runs on bio_aof" in p50["claim"]
    assert "spans 2.4 loop iterations" in p50["claim"]  # 10 ms / 4.2 ms
    assert p50["explained_share"] == pytest.approx((10_000 * 0.88) / (10_000 - 920), abs=0.001)
    assert p50["evidence"]["baseline"]["main_thread"]["blocked_in_fsync_pct"] == 88


def test_durability_note_only_when_ack_semantics_differ():
    assert explain.durability_note({"label": "a", "server": {"appendfsync": "always"}},
                                   {"label": "b", "server": {"appendfsync": "everysec"}})
    assert explain.durability_note({"label": "a", "server": {"appendfsync": "always"}},
                                   {"label": "b", "server": {"appendfsync": "everysec", "bio_aof_offload": True}}) is None


def test_littles_law_flags_a_client_bound_run():
    doc, cells = _doc("x", "always", 1000, 10_000, main(50), {"main": 10})  # 1000/s x 10 ms = 10 of 50
    ll = explain.littles_law(cells[0])["GET"]
    assert ll["in_flight"] == pytest.approx(10) and ll["ratio"] == pytest.approx(0.2)
    assert any("client side" in c for c in explain.caveats(cells, [doc]))
