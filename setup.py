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
shim = Extension(
    "valkeytrace._shim",
    sources=["csrc/shim.c", "csrc/shim_io.c", "csrc/shim_stall.c", "csrc/offload.c", "csrc/offload_state.c", "csrc/offload_conn.c",
             "csrc/offload_req.c", "csrc/offload_exit.c", "csrc/offload_bound.c", "csrc/offload_fds.c", "csrc/offload_links.c", "csrc/replica_hold.c", "csrc/vt_cmds.c", "csrc/vt_resp.c"],
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
