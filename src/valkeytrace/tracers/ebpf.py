"""The eBPF backend: loads the bcc programs of probes/ and reads their maps.

This is the only module that imports bcc (Debian's python3-bpfcc, never PyPI's "bcc"). Only
tracepoints and uprobes are used: the kernels we target may have no kprobes, and their headers
may come from another kernel version, so no kernel struct is ever read.
"""
from __future__ import annotations

import os
import tempfile

from valkeytrace.errors import VTError
from valkeytrace.tracers import PROBES_DIR, probe_source


def import_bcc():
    try:
        import bcc  # noqa: F401  (Debian python3-bpfcc)
    except ImportError as exc:
        raise VTError("bcc is not importable: install Debian's python3-bpfcc and use a venv made with "
                      "--system-site-packages (make setup does both)") from exc
    return bcc


def cflags(**defines) -> list[str]:
    """-D flags for the probe parameters, plus the include path of the shared layout header."""
    flags = [f"-I{PROBES_DIR}", "-Wno-visibility", "-Wno-macro-redefined"]
    flags += [f"-D{k}={int(v)}" for k, v in defines.items()]
    return flags


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
