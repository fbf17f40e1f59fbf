"""The warnings' words come from one table (reporters/sentences.py): every code the analysis and the
recorder hand over has a template, and a recording's own sentences (made before codes) still show."""
import ast
import pathlib

from valkeytrace.analysis.note import Note
from valkeytrace.reporters.sentences import WARNING_TYPES as WARNINGS, warning_text, warning_texts

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "valkeytrace"


def _codes_handed_over() -> set[str]:
    """Every code given to Note(...) or document.add_warning(...) or written as {"code": ...} in the package."""
    codes = set()
    for p in SRC.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant):
                name = getattr(n.func, "id", getattr(n.func, "attr", ""))
                if name == "Note":
                    codes.add(n.args[0].value)
            if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_warning" and len(n.args) > 1:
                codes.add(n.args[1].value)
            if isinstance(n, ast.Dict):
                for k, v in zip(n.keys, n.values):
                    if isinstance(k, ast.Constant) and k.value == "code" and isinstance(v, ast.Constant):
                        codes.add(v.value)
    return codes


def test_every_warning_code_has_its_template():
    handed = {c for c in _codes_handed_over() if "." not in c and c not in ("host_cpu", "cpu_wait", "throughput_moved",
                                                                             "repeats_disagree")}
    assert handed and handed <= set(WARNINGS), sorted(handed - set(WARNINGS))


def test_a_warning_is_rendered_from_its_figures_and_said_once():
    stall = Note("stall", {"workload": "read-heavy", "value_size": 64, "repeat": 2, "intervals": 3,
                           "threshold_ms": 100.0, "longest_ms": 1234.4})
    text = warning_text(stall)
    assert "read-heavy 64 B #2: 3 interval(s)" in text and "the longest 1,234 ms" in text
    assert warning_texts([stall, Note("stall", dict(stall.figures)), Note("recorded", {"text": "old words"})]) \
        == [text, "old words"]
    assert warning_text(Note("from_a_newer_version", {"n": 3})) == "from_a_newer_version: n 3"


def test_the_servers_end_is_worded_from_how_it_ended():
    base = {"workload": "write-only", "value_size": 256, "repeat": 1, "at_s": 1.5, "not_measured": 2, "gone": True}
    assert "was killed by SIGKILL during" in warning_text(Note("server_ended", dict(base, signal="SIGKILL", status=None)))
    exited = warning_text(Note("server_ended", dict(base, signal=None, status=1, cause="Can't persist AOF")))
    assert "exited with status 1: Can't persist AOF during write-only 256 B repeat 1, 1.50 s" in exited
    assert exited.endswith("2 run(s) not measured")
    assert "the server died during" in warning_text(Note("server_ended", dict(base, gone=False)))


def _clause_types() -> set[type]:
    """Every typed clause the analysis can hand over (note.Clause's subclasses, recursively)."""
    import valkeytrace.analysis.clauses  # noqa: F401  (their modules define them)
    import valkeytrace.analysis.facts  # noqa: F401
    import valkeytrace.analysis.verdict  # noqa: F401
    from valkeytrace.analysis.facts import Caveat
    from valkeytrace.analysis.note import Clause

    out, todo = set(), [Clause]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            out.add(sub)
    return out - {Caveat}


def test_every_clause_and_caveat_has_its_template_and_no_sentence_is_made_in_analysis():
    from valkeytrace.reporters.claims import TEMPLATES

    missing = sorted(t.__name__ for t in _clause_types() if t not in TEMPLATES)
    assert not missing, f"clauses with no words in reporters/claims.py: {missing}"
    # the analysis keeps no sentence-making helpers (the words' formatters live in the reporters)
    for p in (SRC / "analysis").glob("*.py"):
        names = {n.name for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.FunctionDef)}
        assert not {n for n in names if n.endswith("_sentence") or n in ("_ms", "_pct")}, p.name


def test_a_rule_and_a_clause_say_their_figures():
    from valkeytrace.analysis import clauses as cl
    from valkeytrace.analysis.note import Rule
    from valkeytrace.reporters.claims import say

    assert say(Rule("rule.repeats", [3, 2], min_effect=0.15)) == \
        "repeats: 15% floor, disjoint ranges or rank test (n=3 vs n=2)"
    assert say(cl.Change("GET", "p50_us", 10_000.0, 400.0)) == "GET p50 10.00 ms -> 400 µs (\u221296%):"
    assert cl.Significance("significance.none", [3, 3]).to_json() == {"code": "significance.none",
                                                                       "figures": {"n": [3, 3]}}
    assert say(Note("interrupted")) == warning_text(Note("interrupted"))  # one function for every record


def test_each_warning_is_said_from_the_one_table_by_its_figures_type():
    from valkeytrace.reporters.claims import TEMPLATES

    assert all(t in TEMPLATES for t in WARNINGS.values())  # claims, facts and warnings: one table of words
    # figures that are not the code's declared ones are said as they are, never half-rendered
    assert warning_text(Note("merge_unpaired", {"windows": "many"})) == "merge_unpaired: windows many"
    assert warning_text(Note("missed_fsync", {"workload": "w"})) == "missed_fsync: workload w"
