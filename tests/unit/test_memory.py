"""What a cell held in memory (analysis/memory.py) from sampled windows, the stall log's reading
(tracers/stalls.py) and the words reports use (reporters/memory_words.py): pure logic on made-up samples."""
import numpy as np

from valkeytrace.analysis.memory import cell_memory, durability_check
from valkeytrace.recording.model import DurabilityCheck, MemorySeries, Run
from valkeytrace.reporters.memory_words import _memory_cell, durability_sentence
from valkeytrace.tracers import memory as sampler
from valkeytrace.tracers.stalls import LOG_DTYPE, MAGIC, intervals

COLS = list(sampler.COLUMNS)


def _row(t, held, held_b, dirty, aof, rss, behind=0):
    return [t, held, held_b, dirty, aof, rss, 1000, 10, 0.01, behind]


def _run(rows, stalls=None, check=None) -> Run:
    return Run(workload="write-only", value_size=64, status="ok", durability_check=check,
               memory=MemorySeries(hz=20, columns=COLS, samples=rows, stalls=stalls))


def test_peaks_over_windows_and_the_timeline_of_the_fullest():
    a = _run([_row(0, 5, 25, 4, 100, 1000), _row(0.05, 900, 4500, 700, 9000, 1200)], stalls=[[0.01, 0.04]])
    b = _run([_row(0, 3, 15, 2, None, 1100), _row(0.05, 2000, 10000, 1500, 20000, 1900, behind=30)])
    m = cell_memory([a, b])
    assert (m.held_replies_peak, m.held_bytes_peak, m.dirty_keys_peak) == (2000, 10000, 1500)
    assert (m.aof_buffer_bytes_peak, m.server_rss_kb_peak, m.server_rss_kb_start) == (20000, 1900, 1000)
    assert m.behind_replies_peak == 30 and m.windows == 2
    assert [r[1] for r in m.timeline] == [3, 2000]  # b's window: the larger held peak
    assert m.stalls is None  # b's own (none), not a's


def test_no_source_is_no_figure():
    rows = [[0, None, None, None, None, 900, None, None, None, None]]
    m = cell_memory([_run(rows)])
    assert m.held_replies_peak is None and m.aof_buffer_bytes_peak is None and m.server_rss_kb_peak == 900
    assert cell_memory([Run(workload="write-only", value_size=64, status="ok")]) is None
    assert [_memory_cell(m, f) for f in ("held_replies_peak", "server_rss_kb_peak")] == ["–", "921.6 kB"]


def test_the_durability_check_is_the_last_runs_and_a_loss_is_said_first():
    lost = DurabilityCheck(acked=100, acked_missing=3, examples=[{"key": "key:000000000001", "reloaded": None}])
    runs = [_run([_row(0, 0, 0, 0, 0, 1)]), _run([_row(0, 0, 0, 0, 0, 1)], check=lost)]
    assert durability_check(runs) is lost
    assert durability_sentence("x", lost).startswith("x: 3 of 100 acknowledged writes missing")
    kept = DurabilityCheck(acked=100, acked_missing=0)
    assert "none of 100" in durability_sentence("x", kept)
    assert "could not run" in durability_sentence("x", DurabilityCheck(error="no AOF directory"))


def test_the_stall_log_is_read_in_order_and_a_ring():
    log = np.zeros(1, dtype=LOG_DTYPE)[0]
    log["magic"] = MAGIC
    starts = [1.0, 3.5, 6.0]
    for i, s in enumerate(starts):
        log["e"][i] = (int(s * 1e9), int((s + 1) * 1e9) if i < 2 else 0)
    log["n"] = 3
    assert intervals(log, 3.0, 10.0) == [[0.5, 1.5], [3.0, None]]  # the first ended before the window
    assert intervals(log, 0.0, 2.0) == [[1.0, 2.0]]
    log["magic"] = 0
    assert intervals(log, 0.0, 10.0) == []  # never written by a shim: nothing claimed
