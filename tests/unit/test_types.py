"""The package type-checks: mypy --check-untyped-defs over src/valkeytrace (the configuration, with the
untyped libraries named, is pyproject.toml's [tool.mypy]). A misspelt field of a declared type fails here."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_is_clean_over_the_package():
    res = subprocess.run([sys.executable, "-m", "mypy", "--check-untyped-defs", "src/valkeytrace"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-1000:]
