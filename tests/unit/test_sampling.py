"""The AOF-write sampler's logic (tracers/sampling.py) against a stand-in for a loaded program (it records
what is attached and detached), and the estimate an observing window's sampled calls give (analysis/server.py).
The real programs, attached and detached under load, are test_ebpf.py's attached-cost test."""
import time

import numpy as np

from valkeytrace.analysis.server import estimated
from valkeytrace.recording.model import Histogram
from valkeytrace.tracers import sampling


class Program:
    """What the sampler touches of a loaded program: its raw tracepoints, attached or not, and a thread in an
    AOF write until `busy` seconds have passed."""

    def __init__(self, busy_s: float = 0.0):
        self.raw_tracepoint_fds = {tp: 1 for tp in sampling.BEGINS[:3] + sampling.ENDS}
        self.log: list = []
        self.until = time.monotonic() + busy_s

    def detach_raw_tracepoint(self, tp):
        self.raw_tracepoint_fds.pop(tp)
        self.log.append(("detach", tp, time.monotonic()))

    def attach_raw_tracepoint(self, tp, fn_name):
        assert fn_name == b"raw_tracepoint__" + tp
        self.raw_tracepoint_fds[tp] = 1
        self.log.append(("attach", tp, time.monotonic()))

    def __getitem__(self, name):
        assert name == b"inflight"
        prog = self

        class Inflight:
            def raw(self, slot):
                kind = sampling.CALL_NAMES.index("aof_write") if time.monotonic() < prog.until else 0
                return (7).to_bytes(8, "little") + bytes(24) + kind.to_bytes(4, "little") + bytes(4)
        return Inflight()


def test_a_write_in_flight_keeps_its_end_attached_and_the_begins_go_first():
    prog = Program(busy_s=0.05)
    s = sampling.WriteSampler(prog, lambda: {0: 100})
    s._spans = [[time.monotonic(), 0.0]]  # as start() leaves it, without its thread
    s._detach()
    order = [tp for what, tp, _ in prog.log]
    assert order[:3] == list(sampling.BEGINS[:3]) and set(order[3:]) == set(sampling.ENDS), order
    # the ends stayed until the write in flight ended (50 ms), not longer than END_WAIT_S
    first_begin, first_end = prog.log[0][2], prog.log[3][2]
    assert 0.04 <= first_end - first_begin <= sampling.END_WAIT_S + 0.05
    s._attach()
    order = [tp for what, tp, _ in prog.log[6:]]
    assert order[:3] == list(sampling.ENDS), order  # nothing begins that nothing would end
    assert set(prog.raw_tracepoint_fds) == set(sampling.BEGINS[:3] + sampling.ENDS)


def test_the_share_is_the_attached_time_within_the_window():
    s = sampling.WriteSampler(Program(), lambda: {})
    s._spans = [[10.0, 10.25], [11.0, 11.25], [12.0, 0.0]]  # on 0.25 s a second, on again at 12 until now
    assert s.share(10.0, 12.0) == 0.25
    assert s.share(10.1, 11.1) == (0.15 + 0.1) / 1.0
    assert abs(s.share(11.5, 12.5) - 0.5) < 1e-9  # the open span counts to the window's end


def test_stop_leaves_every_program_attached_and_a_full_duty_never_detaches():
    prog = Program()
    s = sampling.WriteSampler(prog, lambda: {}, duty=0.5)
    s.start()
    time.sleep(sampling.PERIOD_S * 0.75)  # inside the first detached half
    s.stop()
    assert set(prog.raw_tracepoint_fds) == set(sampling.BEGINS[:3] + sampling.ENDS)
    full = Program()
    s = sampling.WriteSampler(full, lambda: {}, duty=1.0)
    s.start()
    s.stop()
    assert full.log == [] and s.share(s._spans[0][0] - 1.0, time.monotonic()) == 1.0  # never detached: all of it


def test_stop_attaches_what_a_failed_detach_left_detached():
    prog = Program()
    s = sampling.WriteSampler(prog, lambda: {})
    s._spans = [[time.monotonic(), 0.0]]
    prog.detach_raw_tracepoint(sampling.BEGINS[0])  # a detach that failed after its first program
    s.stop()
    assert set(prog.raw_tracepoint_fds) == set(sampling.BEGINS[:3] + sampling.ENDS)


def test_a_sampled_histogram_is_estimated_for_the_whole_window():
    rec = Histogram(count=250, sum_ns=2_500_000, min_ns=1000, max_ns=90_000, buckets=[(10, 200), (40, 50)], bytes=25_000)
    est = estimated(rec, 0.25)
    assert (est.count, est.sum_ns, est.bytes, est.buckets) == (1000, 10_000_000, 100_000, [(10, 800), (40, 200)])
    assert (est.min_ns, est.max_ns) == (1000, 90_000)  # the sample's extremes, as seen
    assert estimated(rec, None) is rec and estimated(rec, 1.0) is rec


class Failing(Program):
    """A program whose second AOF-write begin cannot be detached (its fd gone from under it, say): the detach
    fails half way, the first begin detached."""

    def detach_raw_tracepoint(self, tp):
        if tp == sampling.BEGINS[1]:
            raise OSError(9, "Bad file descriptor")
        super().detach_raw_tracepoint(tp)


def test_a_detach_that_fails_half_way_closes_the_span():
    prog = Failing()
    s = sampling.WriteSampler(prog, lambda: {}, duty=0.25)
    t0 = time.monotonic()
    s.start()
    time.sleep(0.6)  # the detach at 0.25 s fails after the first begin went: writes no longer begin at it
    t1 = time.monotonic()
    s.stop()  # attached again: a new span from now
    assert sampling.BEGINS[0] in prog.raw_tracepoint_fds
    assert 0.3 <= s.share(t0, t1) <= 0.6, s._spans  # ~0.25 of 0.6 s, not the whole window
    assert s._spans[-1][1] == 0.0 and s._spans[-1][0] >= t1  # the span the re-attach opened


def test_the_share_of_a_bursty_load_is_the_share_of_its_writes_where_the_fsyncs_say_it():
    """Two quarter-second spans in a 2 s window; the load writes 10 times a second in the first and 100 a second
    elsewhere (a burst), one fdatasync after each write: the share of the time (0.25) would read the 2 + 25
    sampled writes as 108 of the window's 195; the fsyncs' share (27/195) gives 195."""
    times = np.concatenate([np.arange(0.0, 0.25, 0.1), np.arange(0.25, 2.0, 0.01)])
    spans = [(0.0, 0.25), (1.0, 1.25)]
    writes = times[((times >= 0) & (times < 0.25)) | ((times >= 1.0) & (times < 1.25))]
    share, rse = sampling.estimate(spans, 0.0, 2.0, writes, times + 0.001)
    assert abs(len(writes) / share - len(times)) <= 1, (len(writes), share, len(times))
    assert rse is not None and rse < 0.05  # the writes are the fsyncs, one for one: little to be unsure of
    # without fsyncs on the writing thread (everysec): the share of the time, and an uncertainty that covers it
    share, rse = sampling.estimate(spans, 0.0, 2.0, writes, np.array([]))
    assert share == 0.25
    est = len(writes) / share
    assert rse is not None and abs(est - len(times)) <= 3 * rse * est, (est, rse, len(times))


def test_a_steady_load_sampled_by_time_has_the_uncertainty_of_random_arrivals():
    rng = np.random.default_rng(7)
    times = np.sort(rng.uniform(0, 8, 8000))  # 1,000 a second, at random
    spans = [(i, i + 0.25) for i in range(8)]
    writes = np.concatenate([times[(times >= a) & (times < b)] for a, b in spans])
    share, rse = sampling.estimate(spans, 0.0, 8.0, writes, np.array([]))
    assert share == 0.25 and abs(len(writes) / share - 8000) <= 3 * rse * 8000
    assert 0.5 * np.sqrt(0.75 * 2000) / 2000 <= rse <= 3 * np.sqrt(0.75 * 2000) / 2000  # ~Poisson's 1.9%


def test_calls_a_full_call_log_left_to_the_kernels_histogram_are_counted_by_thread():
    """The kernel's histogram holds only the calls whose record a full call log refused: they count in the
    share's totals (tracers/sampling.unrecorded), a slot another thread took counting from zero."""
    from valkeytrace.layout import SHIM_THREAD_DTYPE
    from valkeytrace.tracers.ebpf_window import Snapshot

    def reading(tid, fsyncs, writes):
        t = np.zeros(1, dtype=SHIM_THREAD_DTYPE).view(np.recarray)[0].copy()
        t.tid = tid
        t.hist[sampling._SYNCS[0]].buckets[3] = fsyncs
        t.hist[sampling._AOF_WRITE].buckets[1] = writes
        return t

    a = Snapshot(0, {0: reading(5, 4, 1), 1: reading(9, 0, 0)}, {}, 0, {})
    b = Snapshot(10 ** 9, {0: reading(5, 11, 3), 1: reading(6, 2, 0)}, {}, 0, {})
    assert sampling.unrecorded(a, b, 5, sampling._SYNCS) == 7
    assert sampling.unrecorded(a, b, 5, [sampling._AOF_WRITE]) == 2
    assert sampling.unrecorded(a, b, 6, sampling._SYNCS) == 2  # slot 1 changed hands: from zero
