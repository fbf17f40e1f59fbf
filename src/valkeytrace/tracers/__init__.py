"""Tracer backends: ebpf (bcc; the only module that imports bcc) and shim (LD_PRELOAD)."""
from pathlib import Path

PROBES_DIR = Path(__file__).resolve().parent.parent / "probes"


def probe_source(name: str) -> str:
    """The C text of probes/<name>.bpf.c as installed with the package."""
    return (PROBES_DIR / f"{name}.bpf.c").read_text()
