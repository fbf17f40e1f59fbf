"""The C code that reads untrusted data (shim region reader, histogram, the offload's RESP parsers)
and the offload's threads, under ASan + UBSan and TSan."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_region_reader_and_histogram_under_sanitizers(tmp_path, gcc):
    exe = tmp_path / "region_fuzz"
    build = subprocess.run(
        ["gcc", "-std=gnu11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         "-I", str(ROOT / "csrc"), str(ROOT / "tests/csrc/region_fuzz.c"), str(ROOT / "csrc/shim_region.c"),
         str(ROOT / "csrc/hist.c"), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok ")


def _shim_sources() -> list[str]:
    """setup.py's SHIM_SOURCES (read, not run)."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "SHIM_SOURCES")


OFFLOAD_SOURCES = _shim_sources()


def _build(tmp_path, name, sources, sanitize):
    exe = tmp_path / name
    build = subprocess.run(
        ["gcc", "-std=gnu11", "-O1", "-g", f"-fsanitize={sanitize}", "-fno-sanitize-recover=all", "-I",
         str(ROOT / "csrc"), *[str(s) for s in sources], "-o", str(exe), "-lm", "-ldl", "-lpthread"],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return exe


def test_resp_parsers_split_at_every_byte_and_fed_garbage_under_sanitizers(tmp_path, gcc):
    """The offload's RESP request parser and reply framer against a generator that knows the
    events: every split gives the same ones; garbage and huge lengths neither crash nor report."""
    exe = _build(tmp_path, "resp_fuzz", [ROOT / "tests/csrc/resp_fuzz.c", ROOT / "csrc/vt_resp.c"],
                 "address,undefined")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr


@pytest.mark.parametrize("sanitize,design", [("thread", "bio-write"), ("address,undefined", "bio-write"),
                                             ("thread", "bio-write-block"), ("thread", "main-write")])
def test_offload_threads_under_sanitizers(tmp_path, sanitize, design, gcc):
    """The shim's offload linked into a small valkey-like server (main thread: AOF write + fdatasync,
    two I/O threads writing replies): clients find every reply's AOF bytes already in the file,
    the witness counts 0 early, and TSan (or ASan + UBSan) reports nothing."""
    sources = [ROOT / "tests/csrc/offload_harness.c"] + [ROOT / "csrc" / s for s in OFFLOAD_SOURCES]
    exe = _build(tmp_path, "offload_harness", sources, sanitize)
    env = {**os.environ, "VALKEYTRACE_OFFLOAD": "durable", "VALKEYTRACE_FSYNC_DELAY": "const:300000",
           "VALKEYTRACE_OFFLOAD_DESIGN": design}
    env.pop("LD_PRELOAD", None)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr[-3000:]
    assert "ThreadSanitizer" not in run.stderr and "ERROR" not in run.stderr, run.stderr[-3000:]


def test_open_loop_client_under_sanitizers(tmp_path, gcc):
    """valkeytrace's open-loop client (csrc/vt_load.c) against a small RESP server: a fixed pool and a
    pipelined one answer every request due, a refused connection is an error, ASan + UBSan report nothing,
    and a connection's request queue stays at what is in flight, not at every request it ever sent."""
    exe = _build(tmp_path, "load_harness", [ROOT / "tests/csrc/load_harness.c", ROOT / "csrc/hist.c"], "address,undefined")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr[-3000:]
