"""The explanation on synthetic recordings whose answer is known: noise, a change fsync did not
cause, over-prediction, a #3381-shaped candidate (the what-if and the intervention slope:
test_explain_whatif.py).

Each recording is built raw (runs with client results, progress lines and tracer windows), so the
whole path runs: tables.summarize -> server.summarize_server -> model -> explain."""
import numpy as np
import pytest

from valkeytrace.analysis import explain, model
from valkeytrace.analysis.tables import compare, significance, summarize
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.reporters.claims import claim

WALL_NS = 2_000_000_000
PID = 100


def _hist(values_ns):
    return dict(LatencyHistogram.from_values(np.array(values_ns, dtype=np.uint64)).to_dict(), bytes=0)


def window(iterations, main_fsyncs=0, fsync_us=0.0, on_cpu=0.2, cpu_wait=0.05, idle=0.0, bio_fsyncs=0):
    """One eBPF-shaped window: the main thread blocked in fdatasync main_fsyncs x fsync_us, on CPU
    `on_cpu` of the wall, waiting for a CPU `cpu_wait`, idle `idle`; bio_aof makes bio_fsyncs."""
    fsync_ns = main_fsyncs * fsync_us * 1000
    main_off = {"other": {"runnable": cpu_wait * WALL_NS}}
    if idle:
        main_off["epoll_wait"] = {"sleeping": idle * WALL_NS}
    calls = {}
    if main_fsyncs:
        main_off["fdatasync"] = {"io": fsync_ns}
        calls["fdatasync"] = _hist([fsync_us * 1000] * main_fsyncs)
    # whatever is left of the wall is on CPU; on_cpu is informative only (budget() derives it)
    threads = [{"tid": PID, "name": "valkey-server", "role": "main", "calls": calls, "off_cpu_ns": main_off}]
    bio_calls = {"fdatasync": _hist([4_000_000] * bio_fsyncs)} if bio_fsyncs else {}
    threads.append({"tid": PID + 1, "name": "bio_aof", "role": "bio_aof", "calls": bio_calls,
                    "off_cpu_ns": {"other": {"sleeping": WALL_NS}}})
    return {"backend": "ebpf", "window_ns": WALL_NS, "pid": PID, "main_tid": PID, "threads": threads,
            "lost_events": 0, "blocked_timeline": {"events": []}, "probe": {},
            "eventloop": {"source": "INFO", "cycles": iterations, "duration_us": WALL_NS / 1000}}


def recording(label, cells, appendfsync="always", repeats=3, launches=False):
    """cells: [(server window, GET p50 µs per repeat (list), extra run fields)]; launches: each
    repeat a server launch of its own (valkeytrace compare)"""
    runs = []
    for win, p50s, extra in cells:
        for i, p50 in enumerate(p50s[:repeats]):
            progress = [[0.25 * k, 50 / (p50 / 1e6), p50 / 1000 * (1 + 0.01 * ((k + i) % 3 - 1))] for k in range(9)]
            runs.append({"workload": "read-heavy", "value_size": 64, "repeat": i + 1, "status": "ok",
                         "ops": {"GET": {"role": "measured", "clients": 50, "tps": 50 / (p50 / 1e6), "p50_us": p50,
                                         "p95_us": p50 * 1.1, "p99_us": p50 * 1.3, "mean_us": p50,
                                         "progress": progress},
                                 "SET": {"role": "background", "clients": 8, "tps": 1000.0, "mean_us": p50}},
                         "server": win, **({"launch": i + 1} if launches else {}), **extra})
    return {"format": "valkeytrace-recording", "version": 2, "label": label, "server": {"appendfsync": appendfsync},
            "settings": {}, "runs": runs, "complete": True}


def entry(base_doc, cand_doc, metric="p50_us"):
    b, c = summarize(base_doc), summarize(cand_doc)
    entries = explain.explain_compare(b, c, compare(b, c), base_doc, cand_doc)
    return next(e for e in entries if e.metric == metric and e.op == "GET")


def observed(e):
    return e.evidence["candidate"]["p50_us"] - e.evidence["baseline"]["p50_us"]


# a baseline like appendfsync always at +4 ms here: 469 iterations in 2 s, 383 main-thread fsyncs
ALWAYS = window(469, main_fsyncs=383, fsync_us=4613, cpu_wait=0.02)
EVERYSEC = window(13188, bio_fsyncs=2, cpu_wait=0.175, idle=0.06)


def test_the_model_by_hand():
    res = model.server_residence(summarize(recording("a", [(ALWAYS, [10_000] * 3, {})]))[0].server)
    busy_us = WALL_NS / 1000 - 383 * 4613  # everything but the fsync is busy here (no idle)
    # 383 fsync cycles: each one 4613 µs of fsync and 1/383 of the busy time
    assert res.inputs["unit"] == "fsync cycle" and res.inputs["busy_per_unit_us"] == pytest.approx(busy_us / 383)
    assert res.components["fsync"] == pytest.approx(2 * 4613, rel=1e-3)
    assert sum(res.components.values()) == pytest.approx(2 * (4613 + busy_us / 383), rel=1e-3)
    # no main-thread fsync: the unit is one iteration
    res = model.server_residence(summarize(recording("b", [(EVERYSEC, [400] * 3, {})]))[0].server)
    assert res.inputs["unit"] == "iteration" and res.components["fsync"] == 0
    assert sum(res.components.values()) == pytest.approx(2 * (WALL_NS / 1000 * 0.94) / 13188, rel=1e-3)


def test_a_a_pair_is_not_significant_and_gets_no_share():
    e = entry(recording("a", [(ALWAYS, [5850, 5800, 5900], {})]), recording("b", [(ALWAYS, [5780, 5700, 5950], {})]))
    assert e.significant is False and e.explained_share is None and e.leading_component is None
    assert e.note("significance.none").figures == {"n": [3, 3]}


def test_latency_flat_throughput_down_says_so():
    # the clients were starved: same latency, half the rate (a busy loop beside the clients)
    base = recording("a", [(EVERYSEC, [450, 455, 445], {})])
    cand = recording("b", [(EVERYSEC, [455, 450, 460], {})])
    for r in cand["runs"]:
        r["ops"]["GET"]["tps"] /= 2
        r["ops"]["GET"]["progress"] = [[t, rps / 2, ms] for t, rps, ms in r["ops"]["GET"]["progress"]]
        r["host_cpu"] = {"cpus": 2, "host_cores": 2.0, "server_cores": 0.6, "clients_cores": 0.8,
                         "tracer_cores": 0.0, "other_cores": 0.6}
    for r in base["runs"]:
        r["host_cpu"] = {"cpus": 2, "host_cores": 1.9, "server_cores": 0.8, "clients_cores": 1.1,
                         "tracer_cores": 0.0, "other_cores": 0.0}
    e = entry(base, cand)
    assert e.significant is False and e.explained_share is None
    tps = e.note("throughput_moved").figures["tps"]
    assert tps[1] == pytest.approx(tps[0] / 2, rel=0.02) and e.note("host_cpu").figures["grew"] == {"other processes": 0.6}


def test_one_repeat_is_unknown_and_asks_for_repeats():
    e = entry(recording("a", [(ALWAYS, [10_000], {})], repeats=1), recording("b", [(EVERYSEC, [600], {})], repeats=1))
    assert e.significant is None and e.note("significance.unknown").figures == {"n": [1, 1]}
    assert not [c for c in e.codes() if c.startswith("cause.")], e.codes()  # no cause is named
    # the accounting's share stays in the JSON, qualified by significant: null
    assert 0.8 <= e.explained_share <= 1.2


def test_same_fsync_fraction_latency_changed_by_something_else():
    # identical server windows; the clients' latency rose 30%: fsync did not do it. With one
    # launch a side that is no basis (1.9 fsync cycles per GET against 2.5: a launch's path, as
    # likely as a change); with three launches a side the launches tell, and it is not the fsync
    one = [recording("a", [(ALWAYS, [10_000, 9_900, 10_100], {})]), recording("b", [(ALWAYS, [13_000, 12_900, 13_100], {})])]
    e = entry(*one)
    assert e.significant is False and e.note("significance.paths").figures["n"] == [3, 3], e.codes()
    e = entry(recording("a", [(ALWAYS, [10_000, 9_900, 10_100], {})], launches=True),
              recording("b", [(ALWAYS, [13_000, 12_900, 13_100], {})], launches=True))
    assert e.significant is True
    assert e.explained_share == pytest.approx(0.0, abs=1e-6)
    assert e.leading_component == "outside_server"
    assert e.note("cause.not_fsync").figures["components"] == ["outside_server"]
    # the known answer: the server did the same, so all of the change is outside it
    outside = next(c for c in e.components if c.name == "outside_server")
    assert outside.delta_us == pytest.approx(observed(e), abs=1)


def test_cpu_contention_names_cpu():
    busy = window(13188, bio_fsyncs=2, cpu_wait=0.30, idle=0.0)
    e = entry(recording("a", [(EVERYSEC, [400, 410, 390], {})]), recording("b", [(busy, [1200, 1150, 1160], {})]))
    assert e.significant is True and abs(e.explained_share) <= 0.1
    # the known answer: 2 iterations per request, each holding (30% - 17.5%) of 2 s / 13,188 more
    # waiting for a CPU (short waits, none in the timeline: spread); the rest is outside the server
    wait = next(c for c in e.components if c.name == "cpu_wait")
    assert wait.delta_us == pytest.approx(2 * (0.30 - 0.175) * 2e6 / 13188, abs=0.1)
    assert e.leading_component == "outside_server" and e.note("cause.not_fsync").figures["share"] <= 0.1


def test_over_prediction_is_said_not_clamped():
    # the model attributes ~9 ms of fsync to the baseline; the clients saw only 3 ms go
    e = entry(recording("a", [(ALWAYS, [10_000, 9_900, 10_100], {})]), recording("b", [(EVERYSEC, [7_000, 6_900, 7_100], {})]))
    assert e.explained_share > 1.2
    assert e.note("cause.fsync").figures["fit"] == "over"


def test_3381_shaped_candidate():
    # main never blocked, bio_aof ~200 fsync/s, SETs durable: GET 10 ms -> 0.4 ms
    offload = window(13000, bio_fsyncs=400, cpu_wait=0.17, idle=0.05)
    base = recording("baseline", [(ALWAYS, [10_300, 10_200, 10_400], {})])
    cand = recording("bio-offload", [(offload, [400, 410, 390], {})])
    cand["server"]["bio_aof_offload"] = True
    e = entry(base, cand)
    assert e.significant is True
    assert 0.8 <= e.explained_share <= 1.2 and e.leading_component == "fsync"
    placed = e.evidence["candidate"]["fsync_by_role"]
    assert [(p["role"], p["per_s"]) for p in placed] == [("bio_aof", 200.0)], placed
    # the known answer: the baseline's 2 fsync cycles of 4,613 µs of fsync each, the candidate's none
    fsync = next(c for c in e.components if c.name == "fsync")
    assert fsync.base_us == pytest.approx(2 * 4613, rel=1e-3) and fsync.cand_us == 0
    assert {c.name for c in e.components} == set(model.COMPONENTS)


def test_p99_is_not_modelled():
    e = entry(recording("a", [(ALWAYS, [10_000, 9_900, 10_100], {})]), recording("b", [(EVERYSEC, [400, 410, 390], {})]), "p99_us")
    assert e.components == [] and e.explained_share is None and e.finding == "tail.not_modelled"


def test_significance_needs_a_shift_of_the_interval_samples():
    a = summarize(recording("a", [(ALWAYS, [1000, 1000, 1000], {})]))[0].ops["GET"]
    b = summarize(recording("b", [(ALWAYS, [1200, 1200, 1200], {})]))[0].ops["GET"]
    assert significance(a, b, "p50_us") is True
    b.intervals["latency_us"] = list(a.intervals["latency_us"])  # repeats disjoint: still a change
    assert significance(a, b, "p50_us") is True
    b.spread["p50_us"] = [950.0, 1300.0]  # ranges overlap and the samples are not shifted: noise
    assert significance(a, b, "p50_us") is False
    b.intervals["latency_us"] = [x * 1.5 for x in a.intervals["latency_us"]]  # the samples shifted
    assert significance(a, b, "p50_us") is True
    b.intervals["latency_us"] = [x * 0.5 for x in a.intervals["latency_us"]]  # but against the p50's move
    assert significance(a, b, "p50_us") is False


def test_iterations_per_request_are_measured():
    # the mean GET against the fsync cycle decides whether the median request made the main
    # thread's next poll (1 cycle) or waited one out (2)
    server = summarize(recording("a", [(ALWAYS, [10_000] * 3, {})]))[0].server
    t = model.loop_cycle(server).duration_us
    assert t == pytest.approx(WALL_NS / 1000 / 383, rel=1e-6)  # the whole window is busy: wall / fsyncs
    one = model.request_iterations(server, 1.27 * t)  # as with the clients on a CPU of their own
    assert one.k == 1 and one.shorter_path_share == pytest.approx(0.73) and one.unit == "fsync cycle"
    assert model.request_iterations(server, 1.6 * t).k == 2
    assert model.request_iterations(server, 44 * t).k == 2  # clients' own time: still 2 in the server
    assert model.request_iterations(server, None).k == 2
    # with I/O threads one hop more: 2 or 3
    assert model.request_iterations(server, 1.6 * t, most=3).k == 2
    assert model.request_iterations(server, 2.6 * t, most=3).k == 3
    doc = recording("a", [(ALWAYS, [10_000] * 3, {})])
    assert model.max_iterations(doc) == 2
    doc["server"]["io_threads"] = 2
    assert model.max_iterations(doc) == 3


def test_iterations_that_execute_no_write_belong_to_the_fsync_cycle():
    # appendfsync always with reads answered between fsyncs: 2,470 iterations, 416 of them fsync
    # (as with the server and the clients each on a CPU of their own). A GET still waits for the
    # next fsync: the unit is the cycle (fsync + the short iterations), not a short iteration
    w = window(2470, main_fsyncs=416, fsync_us=4323, cpu_wait=0.0, idle=0.01)
    server = summarize(recording("a", [(w, [5_359] * 3, {})]))[0].server
    cyc = model.loop_cycle(server)
    assert cyc.duration_us == pytest.approx(WALL_NS / 1000 * 0.99 / 416, rel=1e-6)
    assert model.request_iterations(server, 5_556).k == 1
    assert model.decompose(5_359, server, 1).components["outside_server"] == pytest.approx(5_359 - cyc.duration_us)


def test_a_request_answered_in_one_iteration_is_not_counted_twice():
    # appendfsync always with the clients quick to answer: GET mean 1.27 iterations, p50 about
    # one fsync-carrying iteration (5.5 ms of 5.1). A fixed two iterations per request would put
    # 9.2 ms of fsync in a 5.5 ms latency (share 1.7: over-predicts); measured, one.
    quick = window(469, main_fsyncs=383, fsync_us=4613, cpu_wait=0.02)
    base = recording("always", [(quick, [5_500, 5_450, 5_560], {})])
    for r in base["runs"]:
        r["ops"]["GET"]["mean_us"] = 1.27 * 5_050
    e = entry(base, recording("everysec", [(EVERYSEC, [287, 279, 311], {})], "everysec"))
    assert e.significant is True and 0.8 <= e.explained_share <= 1.0
    assert e.evidence["model_inputs"]["baseline"]["request_iterations"]["k"] == 1
    assert e.evidence["model_inputs"]["baseline"]["request_iterations"]["from"] == "mean"
    fsync = next(c for c in e.components if c.name == "fsync")
    assert fsync.base_us == pytest.approx(4613, rel=1e-3)  # one fsync, not two


def test_littles_law_flags_a_client_bound_run():
    doc = recording("x", [(ALWAYS, [10_000] * 3, {})])
    for r in doc["runs"]:
        r["ops"]["GET"]["tps"] = 1000.0  # 1000/s x 10 ms = 10 of 50 clients in flight
    cells = summarize(doc)
    ll = explain.littles_law(cells[0])["GET"]
    assert ll.in_flight == pytest.approx(10) and ll.ratio == pytest.approx(0.2)
    recs = explain.caveats(cells, [doc])
    (own,) = [c for c in recs if c.finding == "clients_own_time"]
    assert [(x.op, x.in_flight, x.clients) for x in own.low] == [("GET", pytest.approx(10), 50)]


def test_durability_note_only_when_ack_semantics_differ():
    def doc(label, **server):
        return {"format": "valkeytrace-recording", "version": 2, "label": label, "server": server, "runs": []}
    differs = explain.durability_differs(doc("a", appendfsync="always"), doc("b", appendfsync="everysec"))
    assert (differs.finding, differs.loose, differs.appendfsync) == ("durability_differs", "b", "everysec")
    assert explain.durability_differs(doc("a", appendfsync="always"),
                                      doc("b", appendfsync="everysec", bio_aof_offload=True)) is None


def test_repeats_that_disagree_are_named():
    # a bimodal p50 (CPU contention: 431 / 527 / 1207 µs) is said to be one; a tight side is not
    base = recording("everysec", [(EVERYSEC, [463, 471, 519], {})], "everysec")
    cand = recording("busy", [(EVERYSEC, [431, 1207, 527], {})], "everysec")
    assert entry(base, cand).note("repeats_disagree").figures["spread"] == {"busy": [431, 1207]}
    assert entry(base, base).note("repeats_disagree") is None


def _contended(doc, waits, main_waits=None):
    """Give each run of doc host CPU figures with the clients' CPU-wait shares waits[i] = (GET
    clients, background SET clients) and, when given, its own window with the main thread
    waiting for a CPU main_waits[i] of the wall."""
    for i, r in enumerate(doc["runs"]):
        r["host_cpu"] = {"cpus": 2, "host_cores": 2.0, "server_cores": 0.6, "clients_cores": 0.8, "tracer_cores": 0.0,
                         "other_cores": 0.6, "clients_cpu_wait": {"measured": waits[i][0], "background": waits[i][1]}}
        if main_waits:
            r["server"] = window(13188, bio_fsyncs=2, cpu_wait=main_waits[i], idle=0.06)
    return doc


def test_where_the_contention_landed_is_named():
    # the same busy loop, two placements: beside the GET clients (they wait 48% of their time,
    # the p50 does not move) or beside the main thread (it waits 30%, the p50 doubles)
    base = _contended(recording("a", [(EVERYSEC, [450, 455, 445], {})]), [(0.05, 0.22)] * 3)
    on_clients = _contended(recording("b", [(EVERYSEC, [455, 450, 460], {})]), [(0.48, 0.29)] * 3)
    for r in on_clients["runs"]:  # starved clients: the same latency at half the rate
        r["ops"]["GET"]["tps"] /= 2
        r["ops"]["GET"]["progress"] = [[t, rps / 2, ms] for t, rps, ms in r["ops"]["GET"]["progress"]]
    e = entry(base, on_clients)
    assert e.note("throughput_moved") is not None, e.codes()
    # the clients kept 25 of 50 requests in flight: the caveat says why, measured
    (own,) = [c for c in e.caveat_records if c.finding == "clients_own_time" and c.label == "b"]
    assert (own.low[0].op, own.low[0].in_flight, own.low[0].clients, own.low[0].waited) \
        == ("GET", pytest.approx(25), 50, 0.48)
    assert own.held  # the latency they report holds some of that CPU wait too
    wait = e.note("cpu_wait").figures
    assert wait["waits"] == {"the main thread": [17.5, 17.5], "the GET clients": [5.0, 48.0],
                             "the background SET clients": [22.0, 29.0]}, wait
    assert (wait["landed_on"], wait["points"]) == ("the GET clients", 43.0)
    on_main = _contended(recording("c", [(EVERYSEC, [900, 910, 890], {})]), [(0.07, 0.23)] * 3, [0.30] * 3)
    e = entry(base, on_main)
    assert not [c for c in e.caveat_records if c.finding == "clients_waited_cpu"]  # 7%: nothing to say
    waiting = _contended(recording("w", [(EVERYSEC, [900, 910, 890], {})]), [(0.31, 0.23)] * 3)
    assert [(c.label, c.op, c.waited) for c in entry(base, waiting).caveat_records
            if c.finding == "clients_waited_cpu"] == [("w", "GET", 0.31)]
    assert e.significant is True
    waits = e.note("cpu_wait").figures
    assert waits["waits"]["the main thread"] == [17.5, 30.0] and waits["waits"]["the GET clients"] == [5.0, 7.0]
    assert waits["landed_on"] == "the main thread" and waits["points"] == pytest.approx(12, abs=0.5)
    # without the clients' figures (older recordings) nothing is said of them
    plain = recording("d", [(EVERYSEC, [900, 910, 890], {})])
    assert entry(recording("e", [(EVERYSEC, [450, 455, 445], {})]), plain).note("cpu_wait") is None


def test_repeats_that_disagree_say_who_waited_in_each():
    base = _contended(recording("everysec", [(EVERYSEC, [463, 471, 519], {})], "everysec"), [(0.05, 0.22)] * 3)
    cand = _contended(recording("busy", [(EVERYSEC, [431, 1207, 527], {})], "everysec"),
                      [(0.45, 0.3), (0.10, 0.3), (0.44, 0.3)], [0.16, 0.27, 0.15])
    spread = entry(base, cand).note("repeats_disagree")
    (busy,) = spread.waiting
    assert busy.label == "busy" and busy.clients == "GET clients"
    assert [(r.p50_us, r.main_pct, r.clients_wait) for r in busy.repeats] == \
        [(431, pytest.approx(16), 0.45), (1207, pytest.approx(27), 0.10), (527, pytest.approx(15), 0.44)]
    assert ("Waiting for a CPU, busy, per repeat: 431 µs (main thread 16%, GET clients 45%), 1.21 ms (27%, 10%), "
            "527 µs (15%, 44%).") in claim(entry(base, cand))  # one golden sentence


def test_clients_sharing_a_cpu_are_said_to():
    # --client-cpus auto on 2 CPUs puts both read-heavy clients on one: their tails hold each other's turns
    base = recording("a", [(EVERYSEC, [287, 279, 311], {})], "everysec")
    cells = summarize(base)
    assert "clients_shared_cpu" not in [c.finding for c in explain.caveats(cells, [base])]  # no placement recorded
    base["client"] = {"placement": {"requested": "auto", "client_cpus": [1]}}
    assert [(c.label, c.cpus) for c in explain.caveats(cells, [base]) if c.finding == "clients_shared_cpu"] \
        == [("a", [1])]
    base["client"]["placement"]["client_cpus"] = [2, 3]  # one each: nothing to say
    assert "clients_shared_cpu" not in [c.finding for c in explain.caveats(cells, [base])]


def test_a_p50_between_the_paths_is_modelled_where_it_lies_not_on_the_means_path():
    # measured in CI (always +4 ms, 2 repeats, the clients on one CPU): a fifth of the GETs answered
    # at once by iterations that executed no write, the rest after one fsync cycle or two. The
    # p50 lies in the valley (1.47 and 1.62 cycles) while the mean, pulled down by the quick
    # fifth, reads 1.21 and 1.30 (the mean's path: 1). On the mean's path the model left 2.9 ms
    # "outside the server" and gave a share of 0.61; where the p50 lies, the fsync's part.
    t = model.loop_cycle(summarize(recording("a", [(ALWAYS, [10_000], {})]))[0].server).duration_us
    base = recording("always", [(ALWAYS, [1.47 * t, 1.62 * t], {})], repeats=2)
    for r, c in zip(base["runs"], (1.21, 1.30)):
        r["ops"]["GET"]["mean_us"] = c * t
    cand = recording("everysec", [(EVERYSEC, [391, 431], {})], "everysec", repeats=2)
    e = entry(base, cand)
    ins = e.evidence["model_inputs"]["baseline"]
    assert ins["repeats"] == [1, 2] and [p["units_per_request"] for p in ins["per_repeat"]] == [1.47, 1.62]
    assert all(p["request_iterations"]["from"] == "p50" for p in ins["per_repeat"])
    assert 0.8 <= e.explained_share <= 1.0, e.claim
    it = ins["per_repeat"][0]["request_iterations"]
    assert (it["k"], it["most"], it["mean_k"]) == (1.47, 2.0, 1.0)  # between the paths; the mean would give 1
    # the side's components are the mean of its two middle repeats': they add up to its median
    fsync = next(c for c in e.components if c.name == "fsync")
    f = model.loop_cycle(summarize(base)[0].server).fsync_us
    assert fsync.base_us == pytest.approx((1.47 + 1.62) / 2 * f, rel=1e-3)
    assert sum(c.delta_us for c in e.components) == pytest.approx(observed(e), rel=1e-3)


def test_a_p50_near_the_means_path_keeps_it():
    server = summarize(recording("a", [(ALWAYS, [10_000], {})]))[0].server
    t = model.loop_cycle(server).duration_us
    near = model.request_iterations(server, 1.05 * t, p50_us=1.13 * t)  # the demo's: 1.13 cycles, mean 1.07
    assert near.k == 1 and near.source == "mean" and near.p50_in_units == pytest.approx(1.13)
    assert model.request_iterations(server, 1.9 * t, p50_us=1.92 * t).k == 2
    # a p50 beyond the longer path does not move k off the mean's path: the rest stays outside the
    # server (a client slowdown is not made into fsync); without a mean, K
    assert model.request_iterations(server, 1.3 * t, p50_us=2.6 * t).k == 1
    assert model.request_iterations(server, None, p50_us=2.6 * t).k == 2
    assert model.request_iterations(server, 1.2 * t, p50_us=1.5 * t).k == pytest.approx(1.5)


def test_the_median_repeat_is_modelled_on_its_own():
    # three repeats, one of them on the longer path: the side's p50 is the middle one's, and so is
    # its accounting (not the pooled mean's)
    server = summarize(recording("a", [(ALWAYS, [10_000], {})]))[0].server
    t = model.loop_cycle(server).duration_us
    reps = [model.RepeatInput(i, None, p * t, p * t, server) for i, p in ((1, 1.9), (2, 1.0), (3, 1.05))]
    side = model.median_repeat(reps)
    assert [u.repeat for u in side.used] == [3] and side.k == 1
    assert sum(side.components.values()) == pytest.approx(1.05 * t)
    two = model.median_repeat(reps[:2])
    assert [u.repeat for u in two.used] == [2, 1] and two.k == pytest.approx(1.5)
    assert sum(two.components.values()) == pytest.approx((1.9 + 1.0) / 2 * t)
