"""Overload (issue 57), each against a truth it does not compute: open-loop SETs at RATE/s while the
emulated disk stalls STALL every PERIOD (--inject-fsync-delay 1ms,stall:...), on a real server.

- the durable offload with no bound holds what Little's law says (rate x stall), and its memory samples
  come at 10 Hz or more; the stall split puts the requests due in a stall at the stall's length;
- pause: held replies never pass the bound by more than a read's worth, nothing rejected;
- reject: the clients count rejected writes, the server's own counter over the same load agrees, and --verify-durability
  (the server killed, its AOF reloaded by a plain server) finds every acknowledged write;
- the witness can fail: early-ack acknowledges before durable, and the same check finds writes lost;
- everysec postpones its AOF writes while its fsync stalls: its AOF buffer peaks far above always's.
"""
import pytest

from vtcli import report_json, vt

# timed (alone): they assert what a real server's timing gives (held replies against rate x stall)
pytestmark = [pytest.mark.integration, pytest.mark.timed]

RATE, STALL_S, PERIOD_S, N = 8000, 0.4, 1.2, 600


def _record(tmp_path, name: str, *extra, stall=f"{STALL_S:g}s/{PERIOD_S:g}s") -> dict:
    out = tmp_path / f"{name}.vtrace"
    res = vt("record", "--workload", "write-only", "--sizes", "64", "--duration", "2.5", "--repeat", "1",
             "--io-threads", "1", "--keyspace", "5000", "--rate", RATE, "--connections", "grow", "--backend", "shim",
             "--no-demand-pass", "--inject-fsync-delay", f"1ms,stall:{stall}", "-o", out, *extra,
             timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    return report_json(out)["runs"][0]


def _cell(side: dict) -> tuple[dict, dict]:
    c = next(c for c in side["cells"] if c["workload"] == "write-only")
    return c, c["memory"]


def test_unbounded_offload_holds_rate_times_stall(tmp_path):
    side = _record(tmp_path, "free", "--emulate-offload", "durable")
    c, m = _cell(side)
    want = RATE * STALL_S
    assert 0.6 * want <= m["held_replies_peak"] <= 1.4 * want, (m["held_replies_peak"], want)
    # "+OK\r\n" each, at least; the two peaks may be two samples' (the gauges are read one after the other,
    # a reply added between them: 15,600 B against 3,121 replies once)
    assert m["held_bytes_peak"] >= 5 * 0.99 * m["held_replies_peak"]
    assert len(m["timeline"]) >= 10 * 2.5, len(m["timeline"])  # 10 Hz or more over the window
    assert m["stalls"], "the window's stalls are not in the recording"
    op = c["ops"]["SET"]
    # a SET due in a stall waits for the rest of it (half of it at the median): the stall's own length sets it
    assert 0.2 * STALL_S * 1e6 <= op["stall_p50_us"] <= STALL_S * 1e6 * 1.1, op["stall_p50_us"]
    assert op["outside_p50_us"] < 0.1 * STALL_S * 1e6, op["outside_p50_us"]


def test_pause_keeps_held_replies_at_the_bound(tmp_path):
    side = _record(tmp_path, "pause", "--emulate-offload", "durable", "--offload-max-pending", N,
                   "--offload-overflow", "pause")
    c, m = _cell(side)
    assert m["held_replies_peak"] <= 1.2 * N, m["held_replies_peak"]
    assert m["held_replies_peak"] >= 0.5 * N, m["held_replies_peak"]  # the bound was reached: a stall did fill it
    assert not c["ops"]["SET"].get("rejected"), c["ops"]["SET"]
    assert side["emulation"]["offload"]["paused_reads"] > 0


def test_reject_counts_rejected_writes_and_loses_no_acknowledged_one(tmp_path):
    side = _record(tmp_path, "reject", "--emulate-offload", "durable", "--offload-max-pending", N,
                   "--offload-overflow", "reject", "--verify-durability")
    c, m = _cell(side)
    # and the rejected writes' errors behind them (the clients whose replies are held are not read meanwhile)
    assert m["held_replies_peak"] + m["behind_replies_peak"] <= 1.2 * N, m
    op = c["ops"]["SET"]
    rejected = op["rejected"]
    assert rejected > 0
    # the clients' count (every error reply they read: warm-up, window, drain) against the server's own (the
    # shim's counter of writes it renamed) over the same span, the whole load: equal, but for rejections whose
    # reply a client gave up on. The window's counter (its edges the markers as the recorder read them) left out
    # the warm-up's and those read after it: 7,971 to 6,069 once in CI
    off = side["emulation"]["offload"]
    assert rejected <= off["load_rejected_writes"] <= rejected + op["unanswered"], (rejected, off["load_rejected_writes"],
                                                                                    off["rejected_writes"], op)
    dc = side["durability_check"]
    assert dc["acked"] > 1000 and dc["acked_missing"] == 0, dc


def test_the_durability_check_finds_what_early_ack_loses(tmp_path):
    """The witness can fail: early-ack answers SETs before their fdatasync; killed with its queue full,
    acknowledged writes are missing; and a reader on a replica (whose stream leaves at once) read values the
    reloaded primary lacks: phantom reads. The disk stalls once, 10 s from the first sync 3 s after the server's
    start: the kill right after the window lands inside it, whenever the window runs (~4,200 of 4,940 keys
    missing here). With 2 s stalls every 2.4 s the window's end fell in a gap, the queue written, in 2 of 5
    runs once the replica's sync came 5 s sooner; 3 s stalls every 2 s wrote the first stall's queue before
    the second stall's fsync: nothing lost either."""
    side = _record(tmp_path, "early", "--emulate-offload", "early-ack", "--verify-durability", "--replicas", "1",
                   "--replica-get-clients", "4", "--replica-fsync-delay", "none", stall="10s/3s")
    dc = side["durability_check"]
    assert dc["acked"] > 1000 and dc["acked_missing"] > 0, dc
    assert dc["examples"] and dc["examples"][0]["key"].startswith("key:")
    assert dc["replica_reads_checked"] > 100 and dc["phantom_reads"] > 0, dc
    assert dc["phantom_examples"][0]["key"].startswith("key:")


def test_everysec_buffers_while_its_fsync_stalls(tmp_path):
    always = _cell(_record(tmp_path, "always"))[1]
    everysec = _cell(_record(tmp_path, "everysec", "--appendfsync", "everysec"))[1]
    # everysec's main thread postpones write() while the bio fsync is in progress: the buffer holds the
    # stall's writes (RATE x STALL_S SETs of ~60 B); always writes it before every reply
    assert everysec["aof_buffer_bytes_peak"] > 0.3 * RATE * STALL_S * 60, everysec
    assert everysec["aof_buffer_bytes_peak"] > 10 * max(always["aof_buffer_bytes_peak"] or 0, 1), (always, everysec)
