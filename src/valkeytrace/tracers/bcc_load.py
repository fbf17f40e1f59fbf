"""bcc itself: finding it (Debian's python3-bpfcc, never PyPI's unrelated "bcc"), whether an eBPF
recording can run here, and the selftest doctor runs. A recording's tracer never imports bcc (its
compiler would stay in the process's memory): tracers/bcc_child.py compiles in a child; this module
and that child are the only ones that import it."""
from __future__ import annotations

import importlib.util
import os
import tempfile

from valkeytrace import system
from valkeytrace.errors import VTError
from valkeytrace.tracers import bcc_child, probe_source
from valkeytrace.tracers.ebpf_plan import cflags


def import_bcc():
    try:
        import bcc  # noqa: F401  (Debian python3-bpfcc)
    except ImportError as exc:
        raise VTError("bcc is not importable: install Debian's python3-bpfcc and use a venv made with "
                      "--system-site-packages (make setup does both)") from exc
    return bcc


def bcc_location() -> str | None:
    """Where bcc's Python bindings are, or None where there are none (found, not imported: importing
    bcc loads LLVM into the process)."""
    try:
        spec = importlib.util.find_spec("bcc")
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def require_bcc() -> None:
    """A VTError where bcc cannot be found (before anything starts)."""
    if bcc_location() is None:
        import_bcc()


def unusable_reason() -> str | None:
    """Why an eBPF recording cannot run here (None when it can): the checks doctor makes."""
    if not system.has_bpf_privileges():
        return "needs root or CAP_BPF+CAP_PERFMON"
    if bcc_location() is None:
        return "bcc (Debian python3-bpfcc) is not importable"
    if system.tracefs_dir() is None:
        return "tracefs is not mounted (valkeytrace doctor --fix)"
    if not system.headers_present():
        return f"no kernel headers at {system.headers_dir()} (valkeytrace doctor --fix)"
    return None


def compile_probe(name: str, **defines):
    """Compile and load probes/<name>.bpf.c in a child (tracers/bcc_child.py); its tracepoint probes
    attached as bcc attaches them on load: a tracers/bpf_fd.Program."""
    require_bcc()
    return bcc_child.compile_program(probe_source(name).encode(), cflags(**defines), cache=False)  # the compiler tried


def selftest(calls: int = 7) -> int:
    """Load the selftest probe, make `calls` fdatasync(2) calls, return how many it counted."""
    bpf = compile_probe("selftest", TARGET_TGID=os.getpid())
    try:
        with tempfile.TemporaryFile() as f:
            for _ in range(calls):
                os.fdatasync(f.fileno())
        return bpf[b"fdatasync_calls"].value(0)
    finally:
        bpf.cleanup()
