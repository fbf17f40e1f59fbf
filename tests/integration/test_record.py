"""record + report end to end: a real valkey-server (embedded) and a real benchmark client."""
import json

import pytest

from valkeytrace.recording import format as recfmt
from vtcli import vt

pytestmark = pytest.mark.integration
SHORT = ["--sizes", "64", "--repeat", "1", "--duration", "1", "--keyspace", "2000", "--backend", "none"]



@pytest.fixture(scope="module")
def two_recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    paths = {}
    for mode in ("always", "everysec"):
        p = d / f"{mode}.vtrace"
        # no GET-only passes: nothing here reads them (the predictions' tests do); 71-86 s of CI's first phase
        res = vt("record", "--workload", "all", "--appendfsync", mode, *SHORT, "--no-demand-pass", "-o", str(p))
        assert res.returncode == 0, res.stderr + res.stdout
        assert "valkeytrace report" in res.stdout  # prints the report commands
        paths[mode] = p
    return paths


def test_recording_holds_everything_measured(two_recordings):
    doc = recfmt.read(two_recordings["always"])
    assert doc["complete"] and doc["label"] == "fsync-always"
    assert doc["server"]["appendfsync"] == "always" and doc["server"]["version"]
    assert doc["host"]["cpus"] >= 1 and doc["host"]["storage"]["fstype"]
    assert doc["client"]["name"] in ("redis-benchmark", "valkey-benchmark")
    runs = {r["workload"]: r for r in doc["runs"]}
    get = runs["read-heavy"]["ops"]["GET"]
    assert get["tps"] > 0 and get["p50_us"] > 0 and get["percentile_distribution"]
    assert get["command"][0].endswith("benchmark") and "-c" in get["command"]
    bg = runs["read-heavy"]["ops"]["SET"]
    assert bg["role"] == "background" and bg["tps"] > 0  # the background load ran in the window
    assert runs["write-only"]["ops"]["SET"]["clients"] == 50


def test_report_json_fields(two_recordings, tmp_path):
    out = tmp_path / "r.json"
    res = vt("report", str(two_recordings["always"]), "--format", "json", "-o", str(out))
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert d["format"] == "valkeytrace-report" and d["version"] == 2
    run = d["runs"][0]
    assert set(run["server"]) >= {"version", "appendfsync", "io_threads", "bio_aof_offload"}
    cell = [c for c in run["cells"] if c["workload"] == "read-heavy"][0]
    assert cell["value_size"] == 64 and cell["repeats"] == 1
    assert set(cell["ops"]["GET"]) >= {"tps", "mb_s", "p50_us", "p95_us", "p99_us", "clients"}
    assert cell["ops"]["GET"]["tps"] > 0


def test_compare_markdown_and_json(two_recordings, tmp_path):
    a, b = str(two_recordings["always"]), str(two_recordings["everysec"])
    res = vt("report", "--compare", a, b, "--format", "markdown", "--no-whatif")
    assert res.returncode == 0, res.stderr
    assert "| fsync-always | 64 B | GET |" in res.stdout and "| fsync-everysec | 64 B | GET |" in res.stdout
    assert "| delta | 64 B | SET |" in res.stdout
    res = vt("report", "--compare", a, b, "--format", "json", "--no-whatif")
    rows = json.loads(res.stdout)["compare"]["rows"]
    assert {(r["workload"], r["op"]) for r in rows} >= {("read-heavy", "GET"), ("write-only", "SET")}
    res = vt("report", "--compare", a, b, "--format", "csv", "--no-whatif")
    assert res.returncode == 0 and res.stdout.startswith("system,workload")



def test_server_command_mode_stops_the_server(tmp_path):
    import psutil

    from valkeytrace.server.binaries import embedded_server
    from valkeytrace.server.process import free_port

    port = free_port()
    p = tmp_path / "cmd.vtrace"
    res = vt("record", "--workload", "write-only", *SHORT, "-o", str(p), "--",
             embedded_server(), "--port", str(port), "--save", "", "--appendonly", "yes",
             "--dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = recfmt.read(p)
    # the port was found from the process's listening sockets
    assert doc["server"]["mode"] == "command" and doc["server"]["port"] == port
    assert not psutil.pid_exists(doc["server"]["pid"]) or \
        psutil.Process(doc["server"]["pid"]).status() == psutil.STATUS_ZOMBIE


def test_attach_mode_never_stops_the_server(tmp_path):
    from valkeytrace.server.process import EmbeddedServer

    with EmbeddedServer(appendfsync="everysec") as srv:
        p = tmp_path / "att.vtrace"
        res = vt("record", "--attach", str(srv.pid), "--workload", "none", "--duration", "1",
                 "--backend", "none", "--repeat", "2", "-o", str(p))
        assert res.returncode == 0, res.stderr
        assert srv.alive() and srv.client().ping()
        doc = recfmt.read(p)
        assert doc["server"]["mode"] == "attach" and doc["runs"][0]["workload"] == "none"
        assert len(doc["runs"]) == 2  # one window a repeat: the three default sizes mean nothing here


@pytest.mark.parametrize("args,needle", [
    (["--sizes", "0"], "positive"),
    (["--sizes", "abc"], "positive"),
    (["--duration", "-1"], "greater than 0"),
    (["--repeat", "0"], "repeat"),
    (["--workload", "bogus"], "workload"),
    (["--backend", "bogus"], "backend"),
])
def test_bad_options_exit_2_with_one_line(args, needle):
    res = vt("record", *args)
    assert res.returncode == 2
    assert needle in res.stderr.lower() and "Traceback" not in res.stderr


def test_embedded_only_option_with_server_command_is_an_error():
    res = vt("record", "--appendfsync", "everysec", "--", "valkey-server")
    assert res.returncode == 2 and "--appendfsync" in res.stderr and "Traceback" not in res.stderr


def test_the_benchmark_clients_run_on_cpus_of_their_own(two_recordings):
    # the recording says where they ran: auto puts them on the last CPU on this 2-CPU host
    import os

    from valkeytrace.workload import placement

    doc = recfmt.read(two_recordings["always"])
    place = doc["client"]["placement"]
    cpus = sorted(os.sched_getaffinity(0))
    assert place["requested"] == "auto" and place["host_cpus"] == cpus
    assert place["client_cpus"] == (cpus[-1:] if len(cpus) >= 2 else None)
    # the server launched with the default I/O threads gets the rest only when they are enough
    rest = placement.server_cpus_for(place["client_cpus"], cpus, doc["server"]["io_threads"])
    assert place["server_moved"] is bool(rest)
    if rest:
        assert place["server_cpus"] == list(rest)


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs 2 CPUs to place the server apart")
def test_a_launched_server_runs_on_the_cpus_the_clients_do_not(tmp_path):
    import os

    p = tmp_path / "one.vtrace"
    res = vt("record", "--workload", "read-heavy", "--io-threads", "1", *SHORT, "-o", str(p))
    assert res.returncode == 0, res.stderr
    place = recfmt.read(p)["client"]["placement"]
    cpus = sorted(os.sched_getaffinity(0))
    assert place["server_moved"] is True and place["client_cpus"] == cpus[-1:] and place["server_cpus"] == cpus[:-1]
    res = vt("report", str(p))
    # the text is wrapped at the terminal's width (a line may end in a space): compared word by word
    assert f"on CPU {cpus[-1]} (the server: on {cpus[0]}" in " ".join(res.stdout.split()), res.stdout[:300]


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs 2 CPUs to place the clients apart")
def test_a_scenario_s_real_clients_are_on_the_placed_cpus():
    # the read-heavy cell's background SET client and its GET client, against a real server:
    # the kernel's own view of each process's affinity while it runs
    import dataclasses
    import os
    import time

    from valkeytrace.server.process import EmbeddedServer
    from valkeytrace.workload.clients import find_client
    from valkeytrace.workload.scenarios import Load, ReadHeavy

    cpu = sorted(os.sched_getaffinity(0))[-1]
    srv = EmbeddedServer(appendfsync="everysec", io_threads=1)
    procs = []
    try:
        client = dataclasses.replace(find_client(), cpus=(cpu,))
        cell = ReadHeavy(Load.for_server(srv, client, keyspace=2000))
        cell.prepare(64)
        procs = [cell.background(64), cell.foreground(64, requests=10_000_000)]
        time.sleep(0.5)
        for p in procs:
            assert p.proc.poll() is None, p.output
            with open(f"/proc/{p.pid}/status") as f:
                allowed = next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list"))
            assert allowed == str(cpu)
        assert len(os.sched_getaffinity(srv.pid)) == len(os.sched_getaffinity(0))  # the server is not moved
        # the background client asks for the short slice (the kernel's own /proc/PID/sched), the GET
        # client keeps the default; where the kernel keeps no custom slice, nice -5 instead
        from valkeytrace.workload import placement

        def sched(pid, key):
            with open(f"/proc/{pid}/sched") as f:
                return next((int(float(line.split(":")[1])) for line in f if line.split(":")[0].strip() == key), None)
        how = placement.background_priority()
        if how["background_slice_us"]:
            assert sched(procs[0].pid, "se.slice") == placement.BACKGROUND_SLICE_US * 1000
            assert sched(procs[1].pid, "se.slice") > placement.BACKGROUND_SLICE_US * 1000
            assert os.getpriority(os.PRIO_PROCESS, procs[0].pid) == os.getpriority(os.PRIO_PROCESS, 0)  # equal weight
        else:
            assert os.getpriority(os.PRIO_PROCESS, procs[0].pid) == placement.BACKGROUND_NICE
    finally:
        for p in procs:
            p.stop()
        srv.stop()
