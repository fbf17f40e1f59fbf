"""bcc itself: importing it (Debian's python3-bpfcc, never PyPI's unrelated "bcc"), whether an
eBPF recording can run here, compiling a probe, and the selftest doctor runs. The only module,
with tracers/ebpf.py, that touches bcc."""
from __future__ import annotations

import os
import tempfile

from valkeytrace import system
from valkeytrace.errors import VTError
from valkeytrace.tracers import probe_source
from valkeytrace.tracers.ebpf_plan import cflags


def import_bcc():
    try:
        import bcc  # noqa: F401  (Debian python3-bpfcc)
    except ImportError as exc:
        raise VTError("bcc is not importable: install Debian's python3-bpfcc and use a venv made with "
                      "--system-site-packages (make setup does both)") from exc
    return bcc


def bcc_location() -> str | None:
    """Where bcc's Python bindings are, or None when they cannot be imported."""
    try:
        bcc = import_bcc()
    except VTError:
        return None
    return os.path.dirname(bcc.__file__)


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
    """Compile and load probes/<name>.bpf.c; tracepoint probes attach on load."""
    bcc = import_bcc()
    return bcc.BPF(text=probe_source(name).encode(), cflags=cflags(**defines))


def selftest(calls: int = 7) -> int:
    """Load the selftest probe, make `calls` fdatasync(2) calls, return how many it counted."""
    bpf = compile_probe("selftest", TARGET_TGID=os.getpid())
    try:
        with tempfile.TemporaryFile() as f:
            for _ in range(calls):
                os.fdatasync(f.fileno())
        return int(bpf[b"fdatasync_calls"][0].value)
    finally:
        bpf.cleanup()


def symbol_address(binary: str, symbol: str) -> int | None:
    """The symbol's virtual address in binary, or None. A uprobe attached by address skips bcc's
    symbol-table walk of the binary (the loop sampler attaches twice a second)."""
    try:
        bcc = import_bcc()
        found = bcc.BPF.get_user_functions_and_addresses(binary.encode(), f"^{symbol}$".encode())
    except Exception:
        return None
    return int(found[0][1]) if found else None
