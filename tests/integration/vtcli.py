"""The valkeytrace command as the integration tests run it: the venv's own entry point, in a
subprocess, output captured (imported by the test modules; pytest puts this directory on the path)."""
import json
import subprocess
import sys
from pathlib import Path

VT = str(Path(sys.executable).with_name("valkeytrace"))
DATA = Path(__file__).resolve().parent.parent / "data"


def vt(*args, timeout=180, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([VT, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


def report_json(*paths) -> dict:
    """`report --format json` of one recording, or of two compared (baseline, candidate)."""
    args = ["--compare", *paths] if len(paths) == 2 else [paths[0]]
    res = vt("report", *args, "--format", "json", timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)
