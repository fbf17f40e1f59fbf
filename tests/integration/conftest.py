"""Fixtures the integration tests share (the `vt` command helper is vtcli.py, a plain module the
tests import). Integration tests need root/bcc/a server; they skip only where this machine truly
lacks the capability, and say which."""
import os

import pytest


def _bpf_unavailable_reason():
    if os.geteuid() != 0:
        return "needs root (or CAP_BPF+CAP_PERFMON) to load BPF programs"
    from valkeytrace.tracers.bcc_load import bcc_location

    if bcc_location() is None:
        return "bcc (Debian python3-bpfcc) not importable in this interpreter"
    return None


@pytest.fixture
def needs_bpf():
    from vtcli import must_have

    reason = _bpf_unavailable_reason()
    if reason:
        must_have(reason)


@pytest.fixture(scope="module")
def needs_bpf_module():
    """needs_bpf for module-scoped fixtures (a recording shared by a module's tests)."""
    from vtcli import must_have

    reason = _bpf_unavailable_reason()
    if reason:
        must_have(reason)


def nobody_can_run_checkout() -> bool:
    """Whether user 'nobody' can run this checkout's venv (not when it sits under a 0700 dir)."""
    import subprocess
    import sys

    if os.geteuid() != 0:
        return False
    res = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "import valkeytrace"],
                         capture_output=True)
    return res.returncode == 0


@pytest.fixture
def as_nobody():
    """Run as user 'nobody' against this checkout. A checkout under a directory only root may
    enter (CI clones into one) gets o+x on those directories for the test, restored after."""
    import stat
    import sys
    from pathlib import Path

    from vtcli import must_have

    if os.geteuid() != 0:
        must_have("needs root to switch to user 'nobody'")
    changed = []
    for d in reversed(Path(sys.prefix).resolve().parents):
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(d, stat.S_IMODE(mode) | stat.S_IXOTH)
            changed.append((d, stat.S_IMODE(mode)))
    try:
        if not nobody_can_run_checkout():
            must_have("user 'nobody' cannot run this checkout's venv")
        yield
    finally:
        for d, mode in changed:
            os.chmod(d, mode)
