"""cffi build script for valkeytrace._native (out-of-line API mode).

setup.py names it in ``cffi_modules``; it is not shipped in the wheel. The declarations come
from csrc/native_api.h, the definitions from csrc/valkeytrace.h, hist.c, shim_region.c, events.c, vt_sched.c and vt_bpfstats.c (the
LD_PRELOAD shim, csrc/shim.c, is a separate library built by setup.py).
"""
from pathlib import Path

from cffi import FFI

CSRC = Path(__file__).resolve().parent

ffibuilder = FFI()
ffibuilder.cdef((CSRC / "native_api.h").read_text())
ffibuilder.set_source(
    "valkeytrace._native",
    '#include "hist.h"\n#include "shim_region.h"\n#include "events.h"\n#include "vt_sched.h"\n#include "vt_bpfstats.h"\n#include "offload_layout.h"\n#include "vt_load.h"\n',
    sources=["csrc/hist.c", "csrc/shim_region.c", "csrc/events.c", "csrc/vt_sched.c", "csrc/vt_bpfstats.c", "csrc/vt_load.c", "csrc/vt_arrivals.c", "csrc/vt_inflight.c", "csrc/vt_reader.c"],  # relative: setup.py runs the build from the project root
    include_dirs=["csrc"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
