"""The Perfetto export: metadata present, B/E free, X slices nested per track, window cut."""
import collections

from valkeytrace.reporters import perfetto


def doc_with_timeline(events):
    return {"format": "valkeytrace-recording", "version": 2, "label": "fsync-always", "runs": [{
        "workload": "read-heavy", "value_size": 64, "repeat": 1, "status": "ok", "window_start": 100.0,
        "ops": {"GET": {"role": "measured", "started_at": 100.0, "progress": [[0.125, 5000.0, 9.8], [0.25, 5100.0, 9.7]]}},
        "server": {"window_ns": 10_000_000, "main_tid": 10, "threads": [{"tid": 10, "name": "valkey-server", "role": "main"},
                                               {"tid": 11, "name": "bio_aof", "role": "bio_aof"}],
                   "blocked_timeline": {"events": events}}}]}


def assert_nested(trace):
    xs = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        assert e["ph"] in ("M", "X", "C")
        if e["ph"] == "X":
            xs[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for iv in xs.values():
        iv.sort()
        stack = []
        for s, t in iv:
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or t <= stack[-1] + 1e-6
            stack.append(t)
    return xs


def test_calls_contain_their_blocked_intervals_and_threads_are_named():
    events = [[1_000_000, 4_000_000, 10, "fdatasync", "call"],
              [1_100_000, 3_800_000, 10, "fdatasync", "io"],
              [6_000_000, 200_000, 10, "other", "runnable"],
              [2_000_000, 3_000_000, 11, "fdatasync", "call"]]
    trace = perfetto.build(doc_with_timeline(events))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert any("main" in n for n in names) and any("bio_aof" in n for n in names)
    xs = assert_nested(trace)
    assert len(xs[(1, 10)]) == 3 and len(xs[(1, 11)]) == 1
    assert any(e["ph"] == "C" for e in trace["traceEvents"])


def test_a_child_crossing_its_parent_is_clipped_not_overlapping():
    events = [[0, 1_000_000, 10, "fdatasync", "call"], [900_000, 300_000, 10, "fdatasync", "io"]]
    assert_nested(perfetto.build(doc_with_timeline(events)))


def test_from_to_cut_the_window():
    events = [[i * 10_000_000, 1_000_000, 10, "fdatasync", "call"] for i in range(100)]  # every 10 ms
    trace = perfetto.build(doc_with_timeline(events), 0.1, 0.2)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert 9 <= len(xs) <= 11
