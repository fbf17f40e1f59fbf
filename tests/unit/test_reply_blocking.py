"""A real #3381 build's INFO debug (reply_blocking_*): parsed from INFO text and said in the
claims. The text below follows the fields the pull request adds to INFO debug (issue 32 lists
them; no #3381 build runs here, so this is the format, not a capture of one)."""
from records import DOC
from valkeytrace.analysis.facts import reply_blocking as held
from valkeytrace.reporters.claims import say
from valkeytrace.server.view import parse_info, reply_blocking

INFO_DEBUG = """# Debug
eventloop_duration_aof_sum:12345
reply_blocking_enabled:1
reply_blocking_read_blocked_count:17
reply_blocking_write_blocked_count:40211
reply_blocking_clients_waiting_ack:8
reply_blocking_uncommitted_keys:3
reply_blocking_previous_acked_offset:1048576
reply_blocking_primary_repl_offset:1049012
"""


class Cell:
    workload, value_size = "write-only", 64


def test_the_fields_are_read_and_others_ignored():
    rb = reply_blocking(INFO_DEBUG)
    assert rb == {"enabled": 1, "read_blocked_count": 17, "write_blocked_count": 40211, "clients_waiting_ack": 8,
                  "uncommitted_keys": 3, "previous_acked_offset": 1048576, "primary_repl_offset": 1049012}
    assert reply_blocking("# Debug\neventloop_duration_aof_sum:1\n") is None
    assert parse_info("a:1\r\nb:x\r\n# S\r\nc:2.5") == {"a": 1, "b": "x", "c": 2.5}


def test_the_claim_says_what_the_server_held_only_for_a_3381_build():
    run = {"status": "ok", "workload": "write-only", "value_size": 64,
           "server_view": {"reply_blocking": reply_blocking(INFO_DEBUG)}}
    doc = {**DOC, "server": {"bio_aof_offload": True}, "runs": [run]}
    said = held("bio-offload", doc, Cell())
    assert said.runs == 1 and said.counts == [("write_blocked_count", 40211), ("read_blocked_count", 17),
                                              ("clients_waiting_ack", 8)]
    assert "writes held 40,211" in say(said)  # its words, once
    assert held("x", {**DOC, "server": {"bio_aof_offload": False}, "runs": [run]}, Cell()) is None
    missing = held("y", {**DOC, "server": {"bio_aof_offload": True}, "runs": [{**run, "server_view": {}}]}, Cell())
    assert missing.runs == 0 and missing.counts == []
