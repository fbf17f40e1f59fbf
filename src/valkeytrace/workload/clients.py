"""Finding the benchmark client: --benchmark PATH, else valkey-benchmark, else redis-benchmark."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from valkeytrace.errors import VTError, VTUsageError

PREFERRED = ("valkey-benchmark", "redis-benchmark")


@dataclass(frozen=True)
class BenchmarkClient:
    path: str
    name: str      # valkey-benchmark | redis-benchmark
    version: str   # e.g. "7.0.15"
    cpus: tuple | None = None  # the CPUs its processes run on (workload/placement.py); None: any
    # set the moment the server ends (server.process.Target.exit_event): a run stops waiting for its
    # client then (redis-benchmark retries a dead server's port until its own end), not at its timeout
    server_ended: Any = field(default=None, compare=False)


def client_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VTUsageError(f"benchmark client {path} cannot run ({exc}); give a working --benchmark PATH")
    m = re.search(r"(\d+\.\d+\.\d+)", out.stdout + out.stderr)
    if out.returncode != 0 or not m:
        raise VTUsageError(f"{path} is not a valkey-benchmark/redis-benchmark (its --version printed "
                           f"{(out.stdout + out.stderr).strip()[:60]!r})")
    return m.group(1)


def find_client(explicit: str | None = None) -> BenchmarkClient:
    path: str | None
    if explicit:
        path = shutil.which(explicit) or explicit
        if not os.path.isfile(path):
            raise VTUsageError(f"--benchmark {explicit}: no such file")
        if not os.access(path, os.X_OK):
            raise VTUsageError(f"--benchmark {explicit}: not executable")
    else:
        path = next((p for p in map(shutil.which, PREFERRED) if p), None)
        if path is None:
            raise VTError("no benchmark client found: install valkey-benchmark, or redis-benchmark "
                          "(Debian: apt-get install redis-tools), or pass --benchmark PATH")
    version = client_version(path)
    name = "redis-benchmark" if "redis" in os.path.basename(path) else "valkey-benchmark"
    return BenchmarkClient(path=path, name=name, version=version)
