"""The workload registry (valkeytrace/workloads.py) is the one the recorder runs and the reports read."""
from valkeytrace import workloads
from valkeytrace.analysis import tables
from valkeytrace.workload.scenarios import SCENARIOS


def test_every_workload_has_a_scenario_and_the_tables_follow_the_registry():
    assert tuple(SCENARIOS) == workloads.NAMES
    assert tables.WORKLOADS == workloads.NAMES and tables.MEASURED_OP == workloads.MEASURED_OP
    for w in workloads.WORKLOADS:
        assert (w.measured_op is None) == (not w.ops) and (w.measured_op is None or w.ops[0] == w.measured_op)
        assert bool(w.title) == bool(w.measured_op)


def test_the_first_rows_note_names_the_clients_from_the_settings():
    from types import SimpleNamespace

    from valkeytrace.reporters.clients import workload_note as _workload_note

    from valkeytrace.recording.model import ServerInfo, Settings

    run = SimpleNamespace(server=ServerInfo(appendfsync="always"), settings=Settings(get_clients=50, set_clients=8))
    assert _workload_note(run, "read-heavy") == "GET c=50 + c=8 background SET; fsync=always"
    run.settings = Settings()
    assert _workload_note(run, "write-only") == "isolated SET c=?; fsync=always"
