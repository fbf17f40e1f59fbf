"""The server summary's registries (analysis/summary.py) against the C header they name, and the
typed summary's JSON against what docs/report-json.md says a report holds."""
import re
from pathlib import Path

from valkeytrace.analysis.summary import BUDGET, TIMED_CALLS, MainThread, ServerSummary, budget_category

ROOT = Path(__file__).resolve().parents[2]
HEADER = (ROOT / "csrc" / "valkeytrace.h").read_text()
CALLS_IN_C = {m.lower(): int(v) for m, v in re.findall(r"#define VT_CALL_([A-Z_]+) (\d+)", HEADER) if m != "KINDS"}


def test_every_registered_call_is_one_the_tracers_time():
    named = set(TIMED_CALLS) | {c for cat in BUDGET for c in cat.calls}
    assert named <= set(CALLS_IN_C), named - set(CALLS_IN_C)
    # every call a thread can be blocked in is in some category or falls to "other blocked"
    assert budget_category("epoll_wait", "sleeping").name == "idle_pct"
    assert budget_category("fdatasync", "io").name == budget_category("fsync", "io").name == "blocked_in_fsync_pct"
    assert budget_category("fdatasync", "runnable").name == "waiting_for_cpu_pct"  # runnable wins over the call
    assert budget_category("socket_write", "sleeping").name == "other_blocked_pct"
    assert budget_category(None, "sleeping").name == "other_blocked_pct"


def test_the_categories_are_main_thread_fields_and_the_json_keys():
    fields = set(MainThread.__dataclass_fields__)
    assert {c.name for c in BUDGET} <= fields and len({c.name for c in BUDGET}) == len(BUDGET)
    js = ServerSummary(backend="ebpf", windows=1, main_thread=MainThread()).to_json()
    assert "cross_check" not in js and set(js["main_thread"]) == fields
    doc = (ROOT / "docs" / "report-json.md").read_text()
    missing = [c.name for c in BUDGET if c.name not in doc]
    assert not missing, f"docs/report-json.md does not name {missing}"
