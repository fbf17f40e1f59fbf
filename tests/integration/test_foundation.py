"""The foundation on this machine: bcc compiles and counts exactly; doctor passes."""
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bcc_program_counts_this_process_fdatasync_calls_exactly(needs_bpf):
    from valkeytrace.tracers import bcc_load as ebpf

    # GIVEN the selftest probe filtering on this tgid; WHEN we make 23 fdatasync calls
    # (and another process makes some too, which must not count)
    other = subprocess.Popen([sys.executable, "-c",
                              "import os,tempfile,time\n"
                              "f=tempfile.TemporaryFile()\n"
                              "for _ in range(200): os.fdatasync(f.fileno()); time.sleep(0.001)"])
    try:
        counted = ebpf.selftest(calls=23)
    finally:
        other.wait()
    # THEN the kernel counted exactly ours
    assert counted == 23


def test_the_compiler_stays_in_its_child_and_the_program_counts_in_the_tracer(needs_bpf):
    """The tracer never maps bcc's compiler: GIVEN a fresh process that compiles the selftest probe
    (tracers/bcc_child.py hands back its fds) and makes 11 fdatasync calls, THEN the program it holds
    counts exactly those, no clang or LLVM library is in its memory map (/proc/self/maps, the kernel's
    word), and its peak RSS (VmHWM) is below the child's (the compiler's)."""
    code = ("import fcntl, os, tempfile\n"
            "from valkeytrace.system import peak_rss_kb\n"
            "from valkeytrace.tracers.bcc_load import compile_probe\n"
            "bpf = compile_probe('selftest', TARGET_TGID=os.getpid())\n"
            "f = tempfile.TemporaryFile()\n"
            "for _ in range(11): os.fdatasync(f.fileno())\n"
            "maps = open('/proc/self/maps').read()\n"
            "print(bpf[b'fdatasync_calls'].value(0), int('LLVM' in maps or 'clang' in maps),\n"
            "      peak_rss_kb() // 1024, int(bpf.compile_peak_rss_mb),\n"
            "      int(all(fcntl.fcntl(f.fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC for f in bpf.funcs.values())))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    counted, llvm, rss, child_rss, cloexec = map(int, res.stdout.split())
    assert counted == 11 and llvm == 0 and cloexec == 1  # no process it starts inherits the programs
    assert rss < child_rss, f"the tracer's peak {rss} MB, the compiling child's {child_rss} MB"


def test_doctor_passes_and_prints_every_check(needs_bpf):
    exe = Path(sys.executable).with_name("valkeytrace")
    res = subprocess.run([str(exe), "doctor"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("privileges", "bcc", "tracefs", "kernel headers", "tracepoints", "uprobes",
                 "kprobes", "benchmark client", "valkey-server", "_native", "CPU 0 speed"):
        assert name in res.stdout, name


def test_cli_version_and_help():
    exe = Path(sys.executable).with_name("valkeytrace")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "valkeytrace" in out.stdout
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "doctor" in out.stdout
