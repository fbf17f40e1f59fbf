"""Tracer backends behind one interface (base.Tracer), made by factory.make_tracer: ebpf (bcc;
the only module that imports bcc; what it loads is planned in ebpf_plan), shim (LD_PRELOAD, its
region in region.py), both, and null (none). emulation.py adds an fsync delay under any of them;
windows.py turns two cumulative readings into a window for both backends."""
import re
from pathlib import Path

PROBES_DIR = Path(__file__).resolve().parent.parent / "probes"


_PART = re.compile(r'^#include "([a-z_]+\.bpf\.h)".*$', re.M)


def probe_source(name: str) -> str:
    """The C text of probes/<name>.bpf.c as installed with the package, its parts
    (`#include "x.bpf.h"`) put in place as text: bcc rewrites map calls (table.lookup()) in the
    program's own text only, not in a header the compiler includes."""
    return _PART.sub(lambda m: (PROBES_DIR / m.group(1)).read_text(), (PROBES_DIR / f"{name}.bpf.c").read_text())
