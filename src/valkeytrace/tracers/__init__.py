"""Tracer backends behind one interface (base.Tracer), made by factory.make_tracer: ebpf (bcc;
the only module that imports bcc; what it loads is planned in ebpf_plan), shim (LD_PRELOAD, its
region in region.py), both, and null (none). emulation.py adds an fsync delay under any of them;
windows.py turns two cumulative readings into a window for both backends."""
from pathlib import Path

PROBES_DIR = Path(__file__).resolve().parent.parent / "probes"


def probe_source(name: str) -> str:
    """The C text of probes/<name>.bpf.c as installed with the package."""
    return (PROBES_DIR / f"{name}.bpf.c").read_text()
