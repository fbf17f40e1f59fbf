"""The C code that reads untrusted data (shim region reader, histogram) under ASan + UBSan."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (installed by make setup)")
def test_region_reader_and_histogram_under_sanitizers(tmp_path):
    exe = tmp_path / "region_fuzz"
    build = subprocess.run(
        ["gcc", "-std=gnu11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         "-I", str(ROOT / "csrc"), str(ROOT / "tests/csrc/region_fuzz.c"), str(ROOT / "csrc/shim_region.c"),
         str(ROOT / "csrc/hist.c"), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok ")
