"""The dirty-replica trade (analysis/trade.py): what counts as a gain or a cost, decided from figures a test
sets; and its verdict line names both."""
from types import SimpleNamespace as NS

from valkeytrace.analysis import trade
from valkeytrace.reporters.trade_words import trade_line


def _fig(p50, p99=None, tps=None):
    return NS(median={"p50_us": p50, "p99_us": p99, "tps": tps})


def _run(mode, phantoms):
    return NS(doc=NS(emulation=NS(offload=NS(mode="durable", replicas=mode))),
              durability_check=NS(phantom_reads=phantoms))


def _repl(lag, dirty_reads, seen, wait):
    return NS(dirty={"reads": 1200, "reads_checked": 1000, "reads_dirty": dirty_reads, "writes": 100,
                     "writes_seen_dirty": seen}, lag_p50_us=lag, waitaof_p50_us=wait, waitaof_p99_us=wait * 2,
              committed_lag_p50_us=None)


def test_committed_gives_clean_reads_for_lag():
    rows = [NS(workload="write-only", value_size=64, op=op, rate=None, base=_fig(*b), cand=_fig(*c), significant={})
            for op, b, c in (("SET", (9000, 11000, 5000), (9100, 11000, 5050)),
                             ("REPLICA_GET", (100, 900, 9000), (110, 950, 8900)))]
    cmp = NS(rows=rows, replication=[NS(workload="write-only", value_size=64, base=_repl(70, 600, 90, 20000),
                                        cand=_repl(9000, 0, 0, 30000), significant={"waitaof_p99_us": False})])
    (t,) = trade.trades(_run("immediate", 0), _run("committed", 0), cmp)
    assert t.modes == ["immediate", "committed"]
    assert t.gains == ["reads_dirty", "writes_seen_dirty_share"]
    # the lag and WAITAOF moved by more than 15%: costs; SET p50 and REPLICA_GET p50 moved less: neither
    # (WAITAOF p99 moved as much, but the compare found it not significant: neither)
    assert t.costs == ["lag_p50_us", "waitaof_p50_us"]
    (cell, line), figs = trade_line(t)
    assert "committed vs immediate: gives fewer dirty replica reads" in line and "worse replica lag p50" in line
    assert "dirty replica reads 600 of 1,000 checked -> 0 of 1,000 checked" in figs


def test_a_phantom_appearing_is_a_cost_and_unknown_figures_are_neither():
    cmp = NS(rows=[], replication=[NS(workload="write-only", value_size=64, base=_repl(None, None, 0, 100),
                                      cand=_repl(None, None, 0, 100), significant={})])
    (t,) = trade.trades(_run("committed", 0), _run("immediate", 3), cmp)
    assert t.costs == ["phantom_reads"] and t.gains == []
