"""Build: the cffi extension valkeytrace._native from csrc/, and probes/ as package data.

Metadata lives in pyproject.toml; this file declares what setuptools cannot read from it: the
cffi module, probes/ mapped into the package, and the shared layout header copied next to the
probes (they include it when bcc compiles them at run time).
"""
import shutil
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py


class build_py_with_header(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "valkeytrace" / "probes"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2("csrc/valkeytrace.h", target / "valkeytrace.h")


# The LD_PRELOAD shim: a plain shared library with no Python entry point, built by the package
# build and found by path next to the _native module (as memray does with its _inject library).
# the shim's sources, named once (benchmarks/offload_cost.py and the sanitizer tests read this list)
SHIM_SOURCES = ["shim.c", "shim_io.c", "shim_stall.c", "shim_durable.c", "offload.c", "offload_state.c", "offload_conn.c", "offload_req.c",
                "offload_exit.c", "offload_bound.c", "offload_fds.c", "offload_links.c", "offload_bio.c", "offload_bio_block.c", "offload_main_write.c", "replica_hold.c", "vt_cmds.c",
                "vt_resp.c"]
shim = Extension(
    "valkeytrace._shim",
    sources=[f"csrc/{s}" for s in SHIM_SOURCES],
    include_dirs=["csrc"],
    libraries=["m", "dl", "pthread"],
    extra_compile_args=["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra",
                        "-Wno-unused-parameter"],
)

setup(
    ext_modules=[shim],
    package_dir={"": "src", "valkeytrace.probes": "probes"},
    packages=find_packages("src") + ["valkeytrace.probes"],
    package_data={"valkeytrace.probes": ["*.bpf.c", "*.bpf.h"]},
    cffi_modules=["csrc/build_ffi.py:ffibuilder"],
    cmdclass={"build_py": build_py_with_header},
    zip_safe=False,
)
