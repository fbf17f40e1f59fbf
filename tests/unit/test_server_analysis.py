"""Server-side summaries from raw tracer windows: budget arithmetic, role merging."""
import dataclasses

import numpy as np
import pytest

from valkeytrace.analysis.server import budget, summarize_server
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.roles import thread_role


# thread names as each family's /proc/PID/task/*/comm shows them (the main thread is tid == pid)
FAMILIES = {
    "valkey 9.x": {"bio_close_file": "bio_close_file", "bio_aof": "bio_aof", "bio_lazy_free": "bio_lazy_free",
                   "bio_rdb_save": "bio_other", "bio_tls_reload": "bio_other", "io_thd_1": "io_thread"},
    "valkey 7.2-8.x": {"bio_close_file": "bio_close_file", "bio_aof": "bio_aof", "bio_lazy_free": "bio_lazy_free",
                       "io_thd_7": "io_thread", "jemalloc_bg_thd": "jemalloc"},
    "redis 6.x-7.0": {"bio_close_file": "bio_close_file", "bio_aof_fsync": "bio_aof", "bio_lazy_free": "bio_lazy_free",
                      "io_thd_1": "io_thread", "jemalloc_bg_thd": "jemalloc"},
}


@pytest.mark.parametrize("family", FAMILIES)
def test_thread_roles_by_family(family):
    assert thread_role(100, 100, "redis-server" if "redis" in family else "valkey-server") == "main"
    for tid, (name, role) in enumerate(FAMILIES[family].items(), start=101):
        assert thread_role(tid, 100, name) == role, name


def test_only_an_unlisted_name_is_unknown():
    assert thread_role(101, 100, "my-module-worker") == "unknown"
    assert thread_role(101, 100, "bio_new_job") == "bio_other"  # a bio thread, of a job not listed


def test_roles_are_recomputed_from_names_on_analysis():
    # a recording made before bio_aof_fsync had a role of its own
    raw = {"window_ns": 10**9, "pid": 100, "main_tid": 100,
           "threads": [{"tid": 101, "name": "bio_aof_fsync", "role": "bio_other", "off_cpu_ns": {},
                        "calls": {"fdatasync": dict(LatencyHistogram.from_values(np.array([10**6], np.uint64)).to_dict(),
                                                    bytes=0)}}]}
    s = summarize_server([raw])
    assert [t.role for t in s.threads] == ["bio_aof"]


def test_budget_splits_off_cpu_by_cause_and_state():
    off = {"fdatasync": {"io": 400, "runnable": 50}, "epoll_wait": {"sleeping": 100},
           "aof_write": {"io": 20}, "other": {"sleeping": 30}}
    b = budget(off, 1000)
    assert b["blocked_in_fsync_pct"] == pytest.approx(40.0)
    assert b["waiting_for_cpu_pct"] == pytest.approx(5.0)  # runnable counts as waiting, whatever the call
    assert b["idle_pct"] == pytest.approx(10.0)
    assert b["blocked_in_aof_write_pct"] == pytest.approx(2.0)
    assert b["other_blocked_pct"] == pytest.approx(3.0)
    assert b["on_cpu_pct"] == pytest.approx(40.0)


def test_budget_never_exceeds_wall_and_says_it_scaled():
    b = budget({"fdatasync": {"io": 1500}}, 1000)
    assert b["blocked_in_fsync_pct"] == pytest.approx(100.0) and b["on_cpu_pct"] == pytest.approx(0.0)
    assert b["off_cpu_over_wall_pct"] == pytest.approx(150.0)
    assert budget({"fdatasync": {"io": 500}}, 1000)["off_cpu_over_wall_pct"] is None


def _thread(tid, name, role, fdatasync_ns=(), off=None):
    calls = {}
    if len(fdatasync_ns):
        calls["fdatasync"] = dict(LatencyHistogram.from_values(np.array(fdatasync_ns, dtype=np.uint64)).to_dict(), bytes=0)
    return {"tid": tid, "name": name, "role": role, "calls": calls, "off_cpu_ns": off or {}}


def test_summary_merges_repeats_and_io_threads_by_role():
    w1 = {"backend": "ebpf", "window_ns": 10**9, "lost_events": 0, "threads": [
        _thread(1, "valkey-server", "main", [4_000_000] * 100, {"fdatasync": {"io": 4 * 10**8}}),
        _thread(2, "bio_aof", "bio_aof"),
        _thread(3, "io_thd_1", "io_thread", off={"other": {"sleeping": 10**6}}),
        _thread(4, "io_thd_2", "io_thread", off={"other": {"sleeping": 10**6}})]}
    w2 = {"backend": "ebpf", "window_ns": 10**9, "lost_events": 2, "threads": [
        _thread(1, "valkey-server", "main", [4_200_000] * 100, {"fdatasync": {"io": 4 * 10**8}})]}
    s = summarize_server([w1, w2])
    m = s.main_thread
    assert m.fdatasync_count == 200 and m.wall_ms == pytest.approx(2000)
    assert 4000 <= m.fdatasync_p50_us <= 4250
    assert m.blocked_in_fsync_pct == pytest.approx(40.0)
    assert s.lost_events == 2
    assert s.role("io_thread").threads == 2 and s.role("io_thread").off_cpu_ms == pytest.approx(2.0)
    assert s.role("bio_aof").fdatasync.count == 0
    assert [t.role for t in s.threads] == ["main", "bio_aof", "io_thread"]


def test_no_tracer_data_gives_no_server_section():
    assert summarize_server([None, None]) is None


def test_on_cpu_is_marked_unmeasured_without_scheduler_data():
    """The shim with no schedstat has only its timed calls: what is left of the wall is not
    measured on-CPU time, and the summary says so; eBPF's sched group or a thread's sched data
    measures it."""
    def window(**extra):
        return {"backend": "shim", "window_ns": 10**9, "lost_events": 0, "threads": [
            dict(_thread(1, "valkey-server", "main", [4_000_000] * 10, {"fdatasync": {"io": 4 * 10**7}}), **extra)]}
    assert summarize_server([window()]).main_thread.on_cpu_measured is False
    with_sched = window(sched={"on_cpu_ns": 5 * 10**8, "runqueue_ns": 10**8})
    assert summarize_server([with_sched]).main_thread.on_cpu_measured is True
    ebpf = dict(window(), backend="ebpf", probe={"probe_groups": ["calls", "fs", "sched"]})
    assert summarize_server([ebpf]).main_thread.on_cpu_measured is True


def test_server_table_states_what_its_figures_are():
    """Every reporter (text, markdown, HTML) renders reporters.base.server_table: its notes say
    when "on CPU" is not measured, when off-CPU time was rescaled, when a loop count is a sample."""
    from types import SimpleNamespace

    from valkeytrace.reporters.base import server_table

    window = {"backend": "shim", "window_ns": 10**9, "lost_events": 3, "threads": [
        _thread(1, "valkey-server", "main", [4_000_000] * 10, {"fdatasync": {"io": 13 * 10**8}}),
        _thread(2, "bio_aof", "bio_aof", [2_000_000] * 4)]}
    srv = summarize_server([window])
    srv.main_thread = dataclasses.replace(srv.main_thread, loop_iterations=500, loop_iterations_counted=False,
                                          loop_iteration_p50_us=90.0, loop_iteration_p99_us=400.0, aof_flushes=0)
    t = server_table("base", SimpleNamespace(server=srv, workload="read-heavy", value_size=64, host_cpu=None))
    notes = " | ".join(text for text, _ in t.notes)
    assert "no scheduler data" in notes
    assert "added up to 130% of the window" in notes and "scaled to 100%" in notes
    assert "a sample of 500 iterations (not a total" in notes
    assert "lost events: 3 (events were lost" in notes
    assert all(warn for text, warn in t.notes if "no scheduler data" in text or "lost" in text)
    # one row per timed call of each role, then its off-CPU row, the last of the role marked
    assert [(cells[0], cells[1], last) for cells, last in t.rows] == [
        ("main", "fdatasync", False), ("", "off-CPU", True), ("bio_aof", "fdatasync", False), ("", "off-CPU", True)]
    assert len(t.columns) + 1 == len(t.rows[0][0])
    # the same window with scheduler data and within the wall: no such statement
    ok = dict(window, threads=[dict(_thread(1, "valkey-server", "main", [4_000_000] * 10,
                                            {"fdatasync": {"io": 4 * 10**7}}),
                                    sched={"on_cpu_ns": 5 * 10**8, "runqueue_ns": 0})], lost_events=0)
    notes = " | ".join(text for text, _ in server_table("b", SimpleNamespace(
        server=summarize_server([ok]), workload="read-heavy", value_size=64, host_cpu=None)).notes)
    assert "no scheduler data" not in notes and "scaled" not in notes and "events were lost" not in notes


def _window_doc(mode, window_s, writes, syncs, on="bio_aof"):
    def calls(n, kind):
        return {kind: {"count": n, "sum_ns": n * 1000, "min_ns": 1000, "max_ns": 1000, "buckets": [[1, n]]}} if n else {}
    threads = [{"tid": 1, "name": "valkey-server", "role": "main", "calls": calls(writes, "aof_write")},
               {"tid": 2, "name": on, "role": on, "calls": calls(syncs, "fdatasync")}]
    run = {"workload": "read-heavy", "value_size": 64, "repeat": 1, "status": "ok",
           "server": {"window_ns": int(window_s * 1e9), "threads": threads}}
    return {"format": "valkeytrace-recording", "version": 2, "label": "x", "server": {"appendfsync": mode}, "runs": [run]}


def test_a_window_without_the_fsyncs_its_mode_implies_is_said():
    from valkeytrace.analysis.server import missed_fsyncs

    # everysec, 4 s of AOF writes, no fsync on any thread: the bio_aof miss of issue 17, said
    (w,) = missed_fsyncs(_window_doc("everysec", 4.0, writes=3000, syncs=0))
    assert w.code == "missed_fsync" and w.figures == {"workload": "read-heavy", "value_size": 64, "repeat": 1,
                                                      "window_s": 4.0, "aof_writes": 3000, "appendfsync": "everysec"}
    assert missed_fsyncs(_window_doc("always", 2.0, writes=500, syncs=0))
    # what the modes allow: fsyncs seen, a window shorter than everysec's period, no writes, no AOF fsync
    assert not missed_fsyncs(_window_doc("everysec", 4.0, writes=3000, syncs=3))
    assert not missed_fsyncs(_window_doc("everysec", 2.0, writes=3000, syncs=0))
    assert not missed_fsyncs(_window_doc("everysec", 4.0, writes=0, syncs=0))
    assert not missed_fsyncs(_window_doc("no", 4.0, writes=3000, syncs=0))
    assert not missed_fsyncs(_window_doc("always", 2.0, writes=500, syncs=480, on="main"))


def test_an_fsync_longer_than_the_window_is_placed_not_missed():
    # a slow disk: bio_aof entered fdatasync before the window and was still inside it at the end;
    # no call completed (the histograms are empty) but the blocked time is there
    from valkeytrace.analysis import explain
    from valkeytrace.analysis.facts import where
    from valkeytrace.analysis.server import missed_fsyncs
    from valkeytrace.reporters.claims import say

    doc = _window_doc("everysec", 4.0, writes=3000, syncs=0)
    doc["runs"][0]["server"]["threads"][1]["off_cpu_ns"] = {"fdatasync": {"io": 3_900_000_000}}
    assert not missed_fsyncs(doc)
    srv = summarize_server([dict(doc["runs"][0]["server"], pid=1, main_tid=1)])
    (place,) = explain.fsync_placement(srv)
    assert place.role == "bio_aof" and place.count == 0 and place.in_flight and place.blocked_ms == 3900
    assert "fdatasync runs on bio_aof (none completed in the window: it was blocked inside one for 3.90 s of it)" \
        in say(where("x", srv))  # one golden sentence
    # waiting for a CPU inside the call is no sign of one in flight
    doc["runs"][0]["server"]["threads"][1]["off_cpu_ns"] = {"fdatasync": {"runnable": 3_900_000_000}}
    assert missed_fsyncs(doc)
