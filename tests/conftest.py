"""Shared fixtures. Integration tests need root/bcc/a server; they skip only where this machine
truly lacks the capability, and say which."""
import os

import pytest


def _bpf_unavailable_reason():
    if os.geteuid() != 0:
        return "needs root (or CAP_BPF+CAP_PERFMON) to load BPF programs"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "bcc (Debian python3-bpfcc) not importable in this interpreter"
    return None


@pytest.fixture
def needs_bpf():
    reason = _bpf_unavailable_reason()
    if reason:
        pytest.skip(reason)
