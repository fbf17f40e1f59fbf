"""The command line's start: each command's module is imported when that command runs, so a report (or a
bad option's one-line error) does not load the recorder, and the version is read only when asked."""
import subprocess
import sys

PROBE = """
import sys
from valkeytrace.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(code, sorted(m for m in sys.modules if m.startswith("valkeytrace.") or m == "importlib.metadata"))
"""


def _run(*args):
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    code, mods = out.stdout.strip().split(" ", 1)
    return int(code), mods


def test_a_report_does_not_load_the_recorder_nor_the_metadata():
    code, mods = _run("report", "/nonexistent/x.vtrace")
    assert code == 1 and "valkeytrace.cli.report" in mods
    assert "valkeytrace.recorder" not in mods and "valkeytrace.cli.compare" not in mods, mods
    assert "importlib.metadata" not in mods, mods


def test_every_command_is_found_and_the_version_when_asked():
    from click.testing import CliRunner
    from valkeytrace.cli import COMMANDS, main

    runner = CliRunner()
    for name in COMMANDS:
        res = runner.invoke(main, [name, "--help"])
        assert res.exit_code == 0 and "Usage:" in res.output, (name, res.output)
    res = runner.invoke(main, ["--version"])
    assert res.exit_code == 0 and "valkeytrace, version" in res.output and "unknown" not in res.output
    code, _ = _run("no-such-command")
    assert code == 2
