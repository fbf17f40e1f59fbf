"""The eBPF backend's window arithmetic without root (tracers/ebpf_window.py) and the checks of
its figures against the kernel's and the shim's (analysis/server.py), on made-up readings."""
import numpy as np

from records import doc, hist, run
from valkeytrace.analysis.server import backend_disagreements, schedstat_disagreements
from valkeytrace.layout import CALL_NAMES, SHIM_THREAD_DTYPE, STATE_NAMES
from valkeytrace.tracers import ebpf_window as w

PID = 1000


def thread_rec(tid, fsync_ns=()):
    t = np.zeros((), dtype=SHIM_THREAD_DTYPE)
    t["tid"] = tid
    h = t["hist"][CALL_NAMES.index("fdatasync")]
    for ns in fsync_ns:
        from valkeytrace._native import lib

        h["buckets"][lib.vt_hist_bucket_index(int(ns))] += 1
        h["count"] += 1
        h["sum_ns"] += int(ns)
        h["max_ns"] = max(int(h["max_ns"]), int(ns))
    return t


def off(tid, runnable=0, sleeping=0):
    a = np.zeros((len(CALL_NAMES), len(STATE_NAMES)), dtype=np.uint64)
    a[CALL_NAMES.index("other"), STATE_NAMES.index("runnable")] = runnable
    a[CALL_NAMES.index("epoll_wait"), STATE_NAMES.index("sleeping")] = sleeping
    return (tid, a, 0)


def test_extra_slots_never_take_a_direct_one_and_are_freed_when_their_thread_goes():
    live = [PID, PID + 1, PID + 200, PID + 300]  # two threads outside the direct range
    extra, untracked = w.assign_extra_slots(live, PID, {})
    assert sorted(extra.values()) == [w.MAX_SLOTS, w.MAX_SLOTS + 1] and not untracked
    assert all(s >= w.MAX_SLOTS for s in extra.values())
    # a thread whose tid maps to a direct slot appears later: it keeps its own, nobody shares it
    extra2, _ = w.assign_extra_slots(live + [PID + 5], PID, extra)
    assert extra2 == extra and PID + 5 - PID not in extra2.values()
    # PID + 200 exits; its slot goes to the next thread outside the range
    extra3, _ = w.assign_extra_slots([PID, PID + 300, PID + 400], PID, extra2)
    assert extra3[PID + 300] == extra[PID + 300] and extra3[PID + 400] == extra[PID + 200]
    # more threads outside the range than extra slots: the rest are untracked, and said so
    many = [PID] + [PID + 500 + i for i in range(w.EXTRA_SLOTS + 2)]
    extra4, untracked4 = w.assign_extra_slots(many, PID, {})
    assert len(extra4) == w.EXTRA_SLOTS and len(untracked4) == 2


def snap(mono_ns, threads, offcpu, sched=None):
    return w.Snapshot(mono_ns, threads, offcpu, 0, sched or {})


def test_a_slot_that_changed_hands_counts_its_new_owner_from_zero():
    names = {PID: "valkey-server", PID + 3: "io_thd_1"}
    slots = {0: PID, 3: PID + 3}
    a = snap(0, {0: thread_rec(PID, [1000] * 5), 3: thread_rec(PID + 33, [2000] * 9)},
             {0: off(PID, runnable=10), 3: off(PID + 33, sleeping=500)})
    # slot 3 was another thread's before the window; by its end it is PID + 3's (the probe reset it)
    b = snap(1_000_000, {0: thread_rec(PID, [1000] * 7), 3: thread_rec(PID + 3, [3000] * 2)},
             {0: off(PID, runnable=30), 3: off(PID + 3, sleeping=40)})
    out = w.window_metrics(a, b, PID, names, slots, [], {"block_threshold_ns": 100_000})
    by_tid = {t["tid"]: t for t in out["threads"]}
    assert by_tid[PID]["calls"]["fdatasync"]["count"] == 2
    assert by_tid[PID]["off_cpu_ns"] == {"other": {"runnable": 20}}
    assert by_tid[PID + 3]["calls"]["fdatasync"]["count"] == 2  # not 2 - 9, nor the old owner's 9
    assert by_tid[PID + 3]["off_cpu_ns"] == {"epoll_wait": {"sleeping": 40}}


def test_a_slot_now_owned_by_another_thread_gives_this_one_nothing():
    a = snap(0, {3: thread_rec(PID + 3, [1000])}, {3: off(PID + 3, sleeping=5)})
    b = snap(10, {3: thread_rec(PID + 67, [1000] * 4)}, {3: off(PID + 67, sleeping=9)})
    out = w.window_metrics(a, b, PID, {PID + 3: "bio_aof"}, {3: PID + 3}, [], {})
    t = out["threads"][0]
    assert t["calls"] == {} and t["off_cpu_ns"] == {}


def test_an_open_interval_counts_up_to_the_reading_and_only_for_its_owner():
    raw = np.zeros((), dtype=w.OFFCPU_DTYPE)
    raw["tid"] = PID
    raw["ns"][CALL_NAMES.index("other"), STATE_NAMES.index("runnable")] = 100
    since = np.zeros((), dtype=w.SINCE_DTYPE)
    since["start_ns"], since["tid"] = 1_000, PID
    since["cause"], since["state"] = CALL_NAMES.index("fdatasync"), STATE_NAMES.index("io")
    owner, ns, _ = w.offcpu_reading(raw.tobytes(), since.tobytes(), 1_500)
    assert owner == PID and ns[CALL_NAMES.index("fdatasync"), STATE_NAMES.index("io")] == 500
    since["tid"] = PID + 9  # a new owner's first interval: the old totals are not its own
    owner, ns, _ = w.offcpu_reading(raw.tobytes(), since.tobytes(), 1_500)
    assert owner == PID + 9 and ns.sum() == 500


def _doc(threads, window_ns=2_000_000_000, shim=None):
    srv = {"backend": "ebpf", "window_ns": window_ns, "pid": PID, "main_tid": PID, "threads": threads}
    if shim:
        srv["shim"] = {"backend": "shim", "window_ns": window_ns, "pid": PID, "main_tid": PID, "threads": shim}
    return doc([run(server=srv)])


def main_thread(runnable, sleeping, sched_on, sched_rq, calls=None):
    return {"tid": PID, "name": "valkey-server", "role": "main", "calls": calls or {},
            "off_cpu_ns": {"other": {"runnable": runnable}, "epoll_wait": {"sleeping": sleeping}},
            "sched": {"on_cpu_ns": sched_on, "runqueue_ns": sched_rq}}


def test_schedstat_agreement_is_checked_per_role():
    # eBPF: 1.0 s off-CPU of 2 s (0.4 s waiting for a CPU); the kernel: on-CPU 1.0 s, run queue 0.4 s
    assert schedstat_disagreements(_doc([main_thread(400e6, 600e6, 1000e6, 400e6)])) == []
    # the wake-up's wait counted as sleep (no sched_wakeup): 0.1 s waiting by eBPF, 0.4 s by the kernel
    out = schedstat_disagreements(_doc([main_thread(100e6, 900e6, 1000e6, 400e6)]))
    assert [(o.code, o.figures["role"], o.figures["measure"], o.figures["kernel_ms"]) for o in out] \
        == [("schedstat", "main", "runqueue", 400.0)], out
    # within 1% of the wall (20 ms): not flagged, however large in relative terms
    assert schedstat_disagreements(_doc([main_thread(12e6, 988e6, 1000e6, 2e6)])) == []
    # a thread the probes never saw switch (no intervals of its own) has only the kernel's figures
    idle = {"tid": PID + 1, "name": "bio_aof", "role": "bio_aof", "calls": {}, "off_cpu_ns": {},
            "sched": {"on_cpu_ns": 0, "runqueue_ns": 0}}
    assert schedstat_disagreements(_doc([main_thread(400e6, 600e6, 1000e6, 400e6), idle])) == []


def test_the_two_backends_counts_are_compared_per_role():
    def calls(n):
        return {"fdatasync": hist(n), "aof_write": hist(n)}
    ebpf = [main_thread(0, 0, 0, 0, calls(1000))]
    assert backend_disagreements(_doc(ebpf, shim=[main_thread(0, 0, 0, 0, calls(1010))])) == []
    out = backend_disagreements(_doc(ebpf, shim=[main_thread(0, 0, 0, 0, calls(1100))]))
    assert sorted((o.figures["call"], o.figures["ebpf"], o.figures["shim"]) for o in out) \
        == [("aof_write", 1000, 1100), ("fsync", 1000, 1100)], out


def _call_events(rows):
    """Ring-buffer records of whole calls: (start_ns, duration_ns, tid, kind name, bytes)."""
    from valkeytrace.layout import BLOCK_EVENT_DTYPE, EVENT_CALL

    arr = np.zeros(len(rows), dtype=BLOCK_EVENT_DTYPE)
    for i, (start, dur, tid, kind, nbytes) in enumerate(rows):
        arr[i]["start_ns"], arr[i]["duration_ns"], arr[i]["tid"] = start, dur, tid
        arr[i]["cause"], arr[i]["state"], arr[i]["bytes"] = CALL_NAMES.index(kind), EVENT_CALL, nbytes
    return [arr.tobytes()]


def test_fsyncs_and_aof_writes_are_counted_from_their_records_plus_what_the_kernel_counted():
    """The probe records each fsync and AOF write and leaves them out of the kernel's histogram unless
    the ring buffer was full: the window's histogram is the records that ended inside it plus the
    kernel's difference (its fallback), by tid."""
    names, slots = {PID: "valkey-server", PID + 2: "bio_aof"}, {0: PID, 2: PID + 2}
    a = snap(1_000_000, {0: thread_rec(PID), 2: thread_rec(PID + 2, [5000] * 3)}, {0: off(PID), 2: off(PID + 2)})
    b = snap(9_000_000, {0: thread_rec(PID), 2: thread_rec(PID + 2, [5000] * 3 + [7000])}, {0: off(PID), 2: off(PID + 2)})
    events = _call_events([
        (500_000, 400_000, PID + 2, "fdatasync", 0),    # ended before the window: not its
        (1_000_000, 300_000, PID + 2, "fdatasync", 0),
        (2_000_000, 900_000, PID + 2, "fdatasync", 0),
        (8_500_000, 600_000, PID + 2, "fdatasync", 0),  # ends after the window's end: the next window's
        (3_000_000, 20_000, PID, "aof_write", 64),
        (4_000_000, 30_000, PID, "aof_write", 128),
    ])
    win = w.window_metrics(a, b, PID, names, slots, events, {})
    by = {t["name"]: t["calls"] for t in win["threads"]}
    sync = by["bio_aof"]["fdatasync"]
    assert sync["count"] == 3 and sync["sum_ns"] == 300_000 + 900_000 + 7000  # two records + the kernel's one
    assert sync["max_ns"] == 900_000
    write = by["valkey-server"]["aof_write"]
    assert write["count"] == 2 and write["sum_ns"] == 50_000 and write["bytes"] == 192
    assert "fdatasync" not in by["valkey-server"]
