"""The eBPF tracer attached to a real valkey-server under a real benchmark client."""
import json
import os
import subprocess
import sys
import time

import pytest
from vtcli import VT, vt, report_json, must_have, skip_unless_recorded

pytestmark = pytest.mark.integration




@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("ebpf")
    out = {}
    for mode in ("always", "everysec"):
        p = d / f"{mode}.vtrace"
        extra = ["--aof-flush-probe", "--loop-sample"] if mode == "always" else []
        res = vt("record", "--workload", "read-heavy", "--sizes", "64", "--repeat", "1", "--duration", "3",
                 "--keyspace", "5000", "--appendfsync", mode, "--backend", "ebpf", "--no-demand-pass", "-o", str(p),
                 *extra)
        skip_unless_recorded(res)
        out[mode] = report_json(p)["runs"][0]["cells"][0]["server"]
        out.setdefault("paths", {})[mode] = p
    return out


def record_server(path, *args, probes=None):
    """One ebpf `record` of a 2 s cell, `appendfsync always` (probes: $VALKEYTRACE_PROBES); its
    first cell's server section. Skips where the machine cannot load eBPF programs."""
    env = {**os.environ, "VALKEYTRACE_PROBES": probes} if probes else None
    res = subprocess.run([VT, "record", "--repeat", "1", "--duration", "2", "--keyspace", "2000", "--no-demand-pass",
                          "--appendfsync", "always", "--backend", "ebpf", "-o", str(path), *args],
                         capture_output=True, text=True, timeout=180, env=env)
    skip_unless_recorded(res)
    return report_json(path)["runs"][0]["cells"][0]["server"]


def roles(server):
    return {t["role"]: t for t in server["threads"]}


def fsync_floor(path) -> float:
    """The fewest fdatasyncs a recorded window (appendfsync always) can hold, from the clients' own count in it:
    each acknowledged SET was made durable by its iteration's fdatasync, and one fdatasync covers at most one
    SET of each SET client (each waits for its reply): the SETs over the window over the clients. A constant
    floor (100, then 50/s, then 10/s) was the CPU's rate, not the server's: 41/s under make test's first phase.
    The clients' rate is over their whole run, the window inside it: x0.8 for its edges (a read-heavy window
    beside other tenants, 2026-12-07: 53 fdatasyncs, 1.9x this floor unscaled, 225 SETs of 8 clients)."""
    cell = report_json(path)["runs"][0]["cells"][0]
    sets = cell["ops"]["SET"]
    return 0.8 * sets["tps"] * cell["server"]["main_thread"]["wall_ms"] / 1000 / sets["clients"]


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_always_fsyncs_on_the_main_thread_about_once_per_writing_iteration(recordings):
    s = recordings["always"]
    m = s["main_thread"]
    assert m["fdatasync_count"] > 100
    assert roles(s)["bio_aof"]["fdatasync"]["count"] == 0
    # every fdatasync on the main thread follows an AOF write of the same flush
    assert roles(s)["main"]["aof_write"]["count"] >= m["fdatasync_count"] * 0.95
    assert m["loop_iterations"] >= m["fdatasync_count"]


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_everysec_fsyncs_on_bio_aof_about_once_a_second(recordings):
    s = recordings["everysec"]
    assert s["main_thread"]["fdatasync_count"] == 0
    bio = roles(s)["bio_aof"]
    assert 2 <= bio["fdatasync"]["count"] + bio["fsync"]["count"] <= 6  # 3 s window


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_default_probes_trace_no_syscall_and_see_the_main_thread_idle(recordings, tmp_path):
    # GIVEN the default probe set: ext4 sync, journal-start and write_begin/end tracepoints (the
    # AOF is on ext4 here) and sched_switch: no uprobe at all, the AOF writes told from the
    # syscall number and fd in the saved registers
    for s in (recordings["always"], recordings["everysec"]):
        assert s["call_source"] == "ext4 tracepoints"
    # THEN the everysec main thread, mostly waiting for events, is seen idle in epoll_wait (the
    # syscall number read from its saved registers), and the iteration count and mean are the
    # server's own, with no sampled distribution
    m = recordings["everysec"]["main_thread"]
    assert recordings["everysec"]["loop_source"] == "INFO stats"
    assert m["idle_pct"] > 1  # without the syscall number it would be 0
    assert m["loop_iterations"] > 0 and m["loop_iteration_mean_us"] > 0
    assert m["loop_iterations_sampled"] == 0


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_loop_sample_probes_beforesleep_for_a_sample_of_iterations(recordings):
    # GIVEN record --loop-sample: beforeSleep probed 0.5% of each second
    s = recordings["always"]
    assert s["loop_source"] == "uprobe:beforeSleep"
    # THEN a sample of iterations has durations; the count stays the server's own
    m = s["main_thread"]
    assert m["loop_iterations"] > m["loop_iterations_sampled"] > 0
    assert m["loop_iteration_tw_p50_us"] > 0


def test_socket_writes_on_request_come_from_the_syscall_source(tmp_path):
    # GIVEN record --socket-writes: the opt-in syscall source (raw sys_enter/exit)
    s = record_server(tmp_path / "sys.vtrace", "--workload", "read-heavy", "--sizes", "64", "--socket-writes")
    # THEN the calls come from syscalls, AOF writes and fdatasync as before, plus socket writes
    assert s["call_source"] == "syscalls"
    assert s["untimed"] == []
    assert s["main_thread"]["fdatasync_count"] >= fsync_floor(tmp_path / "sys.vtrace") > 0
    assert sum(t["socket_write"]["count"] for t in s["threads"]) > 1000


def test_multi_page_aof_writes_end_at_their_last_page(tmp_path):
    # GIVEN SET c=50 of 16 KB values, appendfsync always: each AOF write spans several pages
    s = record_server(tmp_path / "big.vtrace", "--workload", "write-only", "--sizes", "16384")
    assert s["call_source"].startswith("ext4 tracepoints")
    # THEN every write is closed by ext4's write_end of its last page: one per fdatasync, and
    # each carries at least one value
    m, w = s["main_thread"], roles(s)["main"]["aof_write"]
    assert m["fdatasync_count"] >= fsync_floor(tmp_path / "big.vtrace") > 0
    assert abs(w["count"] - m["fdatasync_count"]) <= 0.05 * m["fdatasync_count"]
    assert w["bytes"] >= 16384 * w["count"]
    # and without --socket-writes no syscall is traced: socket writes are not timed, and say so
    assert s["untimed"] == ["socket_write"]
    assert sum(t["socket_write"]["count"] for t in s["threads"]) == 0


@pytest.mark.parametrize("probes, source", [
    # the ext4 tracepoints without sched_switch (no saved-register offset check): AOF writes
    # begin at their call-site uprobe, ext4 still ends them and times the fsyncs
    ("calls,fs,loop", "ext4 tracepoints + AOF-write call sites"),
    # no ext4 tracepoints (as on a filesystem they do not cover): uprobe pairs on the server's
    # fdatasync and AOF-write call sites time everything
    ("calls,sched,loop", "call sites"),
])
def test_call_sites_time_the_aof_path_without_the_default_sources(tmp_path, probes, source):
    s = record_server(tmp_path / "sites.vtrace", "--workload", "read-heavy", "--sizes", "64", probes=probes)
    assert s["call_source"] == source
    # THEN every main-thread fdatasync is timed, one per AOF write, and none on bio_aof
    m = s["main_thread"]
    # the rate is the loop's, and the loop's is the CPU's (alone ~hundreds/s; under make test's first phase's
    # four workers on two CPUs 41/s once): the floor is the clients' own SETs in the window
    assert m["fdatasync_count"] >= fsync_floor(tmp_path / "sites.vtrace") > 0
    assert abs(roles(s)["main"]["aof_write"]["count"] - m["fdatasync_count"]) <= 0.05 * m["fdatasync_count"]
    assert roles(s)["bio_aof"]["fdatasync"]["count"] == 0


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_aof_flush_probe_counts_one_flush_per_loop_iteration(recordings):
    m = recordings["always"]["main_thread"]  # recorded with --aof-flush-probe
    assert m["aof_flushes"] > 0
    assert abs(m["aof_flushes"] - m["loop_iterations"]) <= 0.02 * m["loop_iterations"] + 2


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_budget_parts_agree_with_the_calls_and_the_kernel(recordings):
    """The budget's parts against truths measured apart from it: the time switched out inside
    fdatasync cannot exceed the fdatasync calls' own timed total, and the time waiting for a CPU
    is the kernel's runqueue time (schedstat) within 15% or 1% of the wall. (Under `always` with
    the main thread waiting for a CPU 35% of the time, eBPF's runnable time read 11% below the
    kernel's run_delay on 2026-12-03, ~20 µs an fsync: beyond analysis/server.py's 10%, so the
    report says so; not resolved.)"""
    for s in (recordings["always"], recordings["everysec"]):
        m = s["main_thread"]
        wall = m["wall_ms"]
        main = next(t for t in s["threads"] if t["role"] == "main")
        in_calls = main["fdatasync"]["total_ms"] + main["fsync"]["total_ms"]
        assert m["blocked_in_fsync_pct"] * wall / 100 <= in_calls * 1.02 + 1.0, (m["blocked_in_fsync_pct"], in_calls)
        if main.get("schedstat"):
            rq = main["schedstat"]["runqueue_ms"]
            assert abs(m["waiting_for_cpu_pct"] * wall / 100 - rq) <= max(0.15 * rq, 0.01 * wall), (m, rq)
        assert s["lost_events"] == 0
    assert recordings["always"]["main_thread"]["blocked_in_fsync_pct"] > 5
    assert recordings["everysec"]["main_thread"]["blocked_in_fsync_pct"] == 0


def test_fdatasync_count_agrees_with_an_independent_counter(needs_bpf):
    """GIVEN the tracer and a separate minimal BPF counter on the same server, WHEN SETs run
    under appendfsync always, THEN both count the main thread's fdatasync calls within 2%. The
    counter is read on both sides of each window edge (window_begin/window_end take a few ms, at
    ~5K fdatasync/s): the tracer's count lies between the inner and the outer window's."""
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers.bcc_load import compile_probe
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.workload.clients import find_client

    with EmbeddedServer(appendfsync="always", io_threads=1) as srv:
        tracer = EbpfTracer()
        tracer.start(srv)
        counter = compile_probe("selftest", TARGET_TGID=srv.pid)
        load = subprocess.Popen([find_client().path, "-p", str(srv.port), "-t", "SET", "-c", "8",
                                 "-n", "100000000", "-r", "1000"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            c0_out = counter[b"fdatasync_calls"].value(0)
            tracer.window_begin()
            c0_in = counter[b"fdatasync_calls"].value(0)
            time.sleep(2.0)
            c1_in = counter[b"fdatasync_calls"].value(0)
            metrics = tracer.window_end()
            c1_out = counter[b"fdatasync_calls"].value(0)
        finally:
            load.kill()
            load.wait()
            counter.cleanup()
            tracer.stop()
    main = [t for t in metrics["threads"] if t["role"] == "main"][0]
    ours = main["calls"]["fdatasync"]["count"]
    inner, outer = c1_in - c0_in, c1_out - c0_out
    assert inner > 100
    assert 0.98 * inner <= ours <= 1.02 * outer, (ours, inner, outer)


def test_print_probes_shows_the_program_without_loading_it():
    res = vt("record", "--print-probes")
    assert res.returncode == 0
    assert "int on_site_fdatasync(struct pt_regs *ctx)" in res.stdout
    assert "-DTRACE_SYSCALLS=0" in res.stdout  # no syscall tracepoint by default
    assert "-DBLOCK_THRESHOLD_NS=100000" in res.stdout and "kprobe" not in res.stdout.split("*/", 1)[1]


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_no_probe_left_behind_after_record(recordings):
    from valkeytrace import system

    tfs = system.tracefs_dir()
    if tfs is None:
        must_have("tracefs not mounted")
    assert "valkey" not in (tfs / "uprobe_events").read_text()


@pytest.mark.timed  # the module\'s recordings: made once, with nothing beside them
def test_export_perfetto_and_html_from_a_real_recording(recordings, tmp_path):
    p = recordings["paths"]["everysec"]  # read-heavy 64 B, everysec, eBPF
    out = tmp_path / "t.json"
    assert vt("export", str(p), "--perfetto", str(out)).returncode == 0
    trace = json.loads(out.read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert any(n.startswith("main") for n in names) and any("bio_aof" in n for n in names)
    assert any(e["ph"] == "X" and e["name"] == "fdatasync" for e in trace["traceEvents"])  # bio_aof's fsyncs
    html = tmp_path / "r.html"
    res = vt("report", str(p), "--format", "html", "-o", str(html), "--plot", str(tmp_path / "png"))
    assert res.returncode == 0, res.stderr
    text = html.read_text()
    assert text.count("<svg") >= 3 and "<script" not in text and "http" not in text.split("<svg", 1)[0]
    assert len(list((tmp_path / "png").glob("*.png"))) >= 3


@pytest.mark.parametrize("traced_first", [True, False])
def test_measure_overhead_runs_in_either_order_and_leaves_the_matrix_traced(needs_bpf, tmp_path, traced_first):
    """record --measure-overhead picks its order at random; both orders say what the untraced
    side was, and the runs after it are traced (the probes attached again after a traced-first
    pair detached them)."""
    from valkeytrace.analysis.server import summarize_server
    from valkeytrace.recorder import Recorder, Settings
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.workload.clients import find_client

    settings = Settings(workloads=("read-heavy",), sizes=(64,), repeat=1, duration_s=1.0, keyspace=2000,
                        get_clients=50, set_clients=8, write_clients=50, backend="ebpf")
    tracer = EbpfTracer()
    srv = EmbeddedServer(appendfsync="always", io_threads=1)
    try:
        rec = Recorder(srv, find_client(), settings, tracer, str(tmp_path / "o.vtrace"), {"runs": []})
        o = rec.measure_overhead(traced_first=traced_first)
        assert o["order"] == ("traced first" if traced_first else "untraced first")
        assert o["untraced_side"] == ("the probes detached, the programs still loaded" if traced_first
                                      else "nothing loaded (the probes not yet compiled)")
        assert o["get_tps_ratio"] > 0
        run = rec.run_one(1, "read-heavy", 64)
        assert run["status"] == "ok", run["error"]
        main = summarize_server([run["server"]]).main_thread
        assert main.fdatasync_count > 100 * main.wall_ms / 1000  # appendfsync always: traced after the pair
    finally:
        tracer.stop()
        srv.stop()


def test_attached_under_load_the_probes_still_find_the_syscall_number(needs_bpf):
    """The start-up check of the saved-register offset sleeps a thread of ours; under load the
    CPU it leaves goes to the server, and a check that ignored such switches failed (2-9 hits of
    20): attached to a busy server, the tracer lost the idle cause and fell back to call-site
    uprobes for AOF writes (a costlier probe set). Three starts under a saturating load."""
    from valkeytrace.server.process import AttachedServer, EmbeddedServer
    from valkeytrace.tracers.ebpf import EbpfTracer
    from valkeytrace.workload import keyspace
    from valkeytrace.workload.benchmark import ENDLESS_REQUESTS, ClientProcess, client_argv
    from valkeytrace.workload.clients import find_client

    srv = EmbeddedServer(appendfsync="always", io_threads=2)
    loads = []
    try:
        keyspace.fill(srv.client(), 2000, 64)
        client = find_client()
        loads = [ClientProcess(client_argv(client, srv.host, srv.port, test, c, 64, 2000, ENDLESS_REQUESTS))
                 for test, c in (("SET", 8), ("GET", 50))]
        time.sleep(1.0)
        for _ in range(3):
            t = EbpfTracer()
            t.start(AttachedServer(srv.pid))
            try:
                assert t.info["idle_cause"], t.info
                if t.info["call_source"].startswith("ext4"):  # the AOF on ext4: no uprobe at all
                    assert t.info["call_source"] == "ext4 tracepoints", t.info["call_source"]
            finally:
                t.stop()
    finally:
        for p in loads:
            p.stop()
        srv.stop()


@pytest.mark.timed  # its sampled estimate beside its own busy loop, nothing else (the first phase put it 5.4% off, twice)
def test_attached_the_recording_states_its_own_cost_and_leaves_the_statistics_as_found(tmp_path, needs_bpf):
    """record --attach on a busy server: runs[].tracer.cost lists every program with the kernel's counts, the
    scheduler's programs ran for the start-up check only (0 runs in the window: nothing on every switch), the
    main thread's on-CPU time is the kernel's schedstat (within what the test reads from /proc around the
    recording), and kernel.bpf_stats_enabled is as it was found. The window observes (no load of ours): the
    AOF writes are timed for a share of it (tracers/sampling.py), and their count estimated from the sample is
    the fdatasyncs' (every one timed; under always one write each), also beside a busy loop. (The programs' run counts are not the
    witness here: ext4's tracepoints run for every process's writes, the other tests' beside this one.)"""
    from valkeytrace.recording import format as recfmt
    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.tracers import bpf_cost
    from valkeytrace.workload import keyspace
    from valkeytrace.workload.benchmark import ENDLESS_REQUESTS, ClientProcess, client_argv
    from valkeytrace.workload.clients import find_client

    def on_cpu_ns(pid):
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return int(f.read().split()[0])

    srv = EmbeddedServer(appendfsync="always", io_threads=2)
    loads, hogs = [], []
    found = bpf_cost.stats_state()
    try:
        keyspace.fill(srv.client(), 2000, 64)
        client = find_client()
        loads = [ClientProcess(client_argv(client, srv.host, srv.port, test, c, 64, 2000, ENDLESS_REQUESTS))
                 for test, c in (("SET", 4), ("GET", 16))]
        # a busy loop beside it: the contention under which the sampled estimate read half the truth
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
        time.sleep(0.5)
        cpu0 = on_cpu_ns(srv.pid)
        p = tmp_path / "att.vtrace"
        res = vt("record", "--attach", str(srv.pid), "--workload", "none", "--duration", "2", "--repeat", "1",
                 "--backend", "ebpf", "-o", str(p))
        cpu1 = on_cpu_ns(srv.pid)
        assert res.returncode == 0, res.stderr[-2000:]
        assert bpf_cost.stats_state() == found  # put back as found
        doc = report_json(p)
        cost = doc["runs"][0]["tracer"]["cost"]
        progs = {x["name"]: x for x in cost["programs"]}
        cell = doc["runs"][0]["cells"][0]["server"]
        main = {t["role"]: t for t in cell["threads"]}["main"]
        est, syncs = main["aof_write"]["count"], main["fdatasync"]["count"]
        # how much the server did is the CPU's (a busy loop beside it, the suite's other workers, other tenants:
        # 487 requests over the 2 s once where 1,000 was the floor): the floors are the server's own counts in
        # the same window. Its requests (INFO) are at least its fdatasyncs (under always each follows a SET of
        # its iteration), and the fsync program ran for every one of them (its run count: every process's)
        assert syncs >= 20, main["fdatasync"]  # enough for the 10% below to mean something
        assert cost["counted"] and cost["requests"] >= syncs and cost["bpf_ns_per_request"] > 0, cost
        assert progs["raw_tracepoint__ext4_sync_file_exit"]["runs"] >= syncs, progs
        assert progs["raw_tracepoint__sched_switch"]["runs"] == 0, progs  # detached after the start-up check
        # the share of the window's writes the sample holds (the fsyncs in its spans: 0.09-0.28 of them beside a
        # busy loop, where the spans were a quarter of the time; the spans' timing is test_sampling's)
        share = cell["sampled"]["aof_write"]
        assert 0 < share < 1, cell["sampled"]
        # the sample's writes over the share of the window's writes it holds: the share of the main thread's
        # fdatasyncs in the sampled spans (tracers/sampling.estimate). Over the share of the time it read
        # 0.43-0.58 of the fdatasyncs beside busy loops (their bursts: 3 to 59 fdatasyncs per 125 ms); beside a
        # busy loop, against the server's write(2) calls on its AOF counted apart (test_ebpf_sampled.py), it
        # read 1.000-1.005 of them in 8 windows of 2 s (the share of the time: 0.58-1.07), and the write calls
        # were the fdatasyncs within 2. So within the uncertainty it states from its own spans' spread (3
        # standard errors, +2 for the window's edges), which is itself at most 10%: at worst 0.7-1.3 (the old
        # 0.7-1.4), 0.35-6.7% stated in 9 attached recordings beside a busy loop (docs/performance.md, issue 71)
        rse = cell["sampled_rse"]["aof_write"]
        assert rse <= 0.1, cell["sampled_rse"]
        # and the window's edges: the estimate scales to the tracer's window, the fdatasyncs counted are the cell's;
        # with the spans' writes equal to their fsyncs it read 516/488, 271/257 (the suite's first phase) and
        # 824/844 (alone) on 2026-12-07, 2.4-5.7% apart at a stated 0.4-1.3%: 6% of the count for the edges
        assert abs(est - syncs) <= 3 * rse * est + 2 + 0.06 * syncs, (est, syncs, rse, cell["lost_events"], share)
        # the witness that the AOF-write programs were detached the rest of the time (the kernel's run counts
        # are not: ext4's tracepoints run for every process's writes, other tests' beside this one): the raw
        # sample, as the kernel's records timed it, is the share of the server's own fdatasyncs, not all of them
        timed = next(t for t in recfmt.read(p)["runs"][0]["server"]["threads"] if t["tid"] == srv.pid)["calls"]
        assert abs(timed["aof_write"]["count"] - share * syncs) <= 0.1 * share * syncs + 2, (timed["aof_write"], share, syncs)
        text = vt("report", str(p)).stdout
        assert "AOF writes timed" in text, text[-1500:]
        assert cell["sched_traced"] is False
        on_cpu_ms = cell["main_thread"]["on_cpu_pct"] / 100 * cell["main_thread"]["wall_ms"]
        assert 0 < on_cpu_ms * 1e6 <= (cpu1 - cpu0) * 1.02, (on_cpu_ms, (cpu1 - cpu0) / 1e6)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        for lp in loads:
            lp.stop()
        srv.stop()
