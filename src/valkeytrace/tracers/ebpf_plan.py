"""What the eBPF backend will load, planned without loading anything: probe groups, the C
defines, the kernel's task_struct offsets (from BTF), the printable program. Pure enough to test
without root; `record --print-probes` prints exactly what start() would compile, because both
come from plan() and printable_program() here. bcc is not imported (tracers/ebpf.py loads the plan)."""
from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from valkeytrace import environment, system
from valkeytrace.layout import BLOCK_EVENT_DTYPE
from valkeytrace.tracers import PROBES_DIR, probe_source

MAIN_PROBE = "valkey_threads"
CALL_LOG_BYTES = 16 << 20  # every CPU's call log together, at most (probes/vt_calllog.bpf.h)
RINGBUF_PAGES = 1024  # 4 MiB (mapped twice: 8 MB of the tracer's RSS): ~130k events (32 B) between polls,
# 0.25 s apart while request events are on (ebpf.BUSY_POLL_S; 1 s otherwise): a write-only window of an
# unthrottled server (no injected delay) times ~100k socket events a second, and the poller runs at low
# priority (a full buffer is counted in `lost`, never silent)
LOOP_SYMBOL = "beforeSleep"
FLUSH_SYMBOL = "flushAppendOnlyFile"
# the shim's timed calls (csrc/shim.c): its fdatasync/fsync wrappers call these unless the
# virtual offload takes the call from the main thread
SHIM_SYMBOLS = {"vt_shim_fdatasync": "on_shim_fdatasync_enter", "vt_shim_fsync": "on_shim_fsync_enter"}


# Probe groups:
#   calls    fdatasync/fsync and AOF write(2) timed at their call sites in the server's code
#            (uprobe pairs, tracers/sites.py); nothing runs for other processes or syscalls;
#   fs       when the AOF directory is on ext4: fdatasync/fsync from the raw ext4_sync_file
#            enter/exit tracepoints instead of call sites, and AOF writes from ext4's own steps:
#            its first (the mtime update, write_begin, or a context switch inside write(aof fd))
#            to the write_end that copies its last byte. Telling an AOF write needs the syscall
#            number and fd from the saved user registers (sched, and the offset check at
#            start); without them the start stays a call-site uprobe. A tracepoint hit costs far
#            less than a uprobe hit of the main thread (docs/performance.md), so an
#            `always` iteration carries no uprobe hit instead of four;
#   sched    off-CPU intervals and causes from the raw sched_switch and sched_wakeup tracepoints;
#   loop     event-loop iteration durations from a uprobe on beforeSleep, attached LOOP_DUTY of
#            each second (record --loop-sample). Not a default: its per-second attach/detach and
#            hits cost GET TPS and p99 (docs/performance.md); the iteration
#            count and mean come from the server's own INFO eventloop counters without it;
#   flush    uprobe + uretprobe on flushAppendOnlyFile (record --aof-flush-probe): valkey calls it
#            from every beforeSleep, so its count is the loop count and its time the AOF write +
#            fsync already measured; two more uprobe hits per iteration;
#   requests a client request's arrival, read and reply (raw sk_data_ready, sock_recv_length,
#            sock_send_length, kernel 6.4+; no syscall tracepoint), emitted only while a window asks
#            for them (write-only cells): the durability record's per-write figures (analysis/durability.py);
#   syscalls raw sys_enter/sys_exit: the calls from syscalls instead (used when the binary has no
#            usable call sites), plus socket writes and epoll_wait per thread. Any syscall
#            tracepoint sends every syscall on the machine through the kernel's slow path:
#            a measurable part of GET TPS (docs/performance.md), hence not a default.
# $VALKEYTRACE_PROBES (e.g. "calls,sched") sets the groups for overhead experiments
# (benchmarks/overhead.py --probes; valkeytrace/environment.py).
PROBE_GROUPS = ("calls", "fs", "sched", "requests", "loop", "flush", "syscalls")
DEFAULT_GROUPS = ("calls", "fs", "sched", "requests")
SWITCH_TRACEPOINTS = (b"sched_switch", b"sched_wakeup", b"sched_wakeup_new")  # detached when Plan.switches is off
REQUEST_TRACEPOINTS = (("sock", "sock_recv_length"), ("sock", "sock_send_length"), ("sock", "sk_data_ready"))
# the filesystems whose tracepoints the probe knows (TRACE_FS_SYNC), and the ones it attaches
FS_TRACEPOINTS = {"ext4": ("ext4_sync_file_enter", "ext4_sync_file_exit", "ext4_da_write_begin", "ext4_write_begin",
                           "ext4_da_write_end", "ext4_write_end", "ext4_journalled_write_end")}
# where an AOF write can begin earlier than its first write_begin: the mtime update's ctime (multigrain
# timestamps, 6.13+: once per changed time), else its journal start (6.5+: 1.3 runs a write)
FS_CTIME_START = ("timestamp", "ctime_ns_xchg")
FS_JOURNAL_START = ("ext4", "ext4_journal_start_inode")
# byte offsets past task_struct.stack where the saved user orig_ax may sit (THREAD_SIZE 16K or
# 32K with KASAN, stack padding 0 or 16 with FRED): the probe checks which one holds, in order
SYSNR_CANDIDATES = (16384 - 48, 16384 - 16 - 48, 32768 - 48, 32768 - 16 - 48)


class Uprobe(NamedTuple):
    path: str
    fn: str
    sym: str | None = None    # a symbol, or
    addr: int | None = None   # a virtual address in path (a call site)
    ret: bool = False

    def where(self) -> dict:
        return {"addr": self.addr} if self.addr is not None else {"sym": (self.sym or "").encode()}


def probe_groups(extra: tuple = ()) -> set[str]:
    override = environment.probe_groups_override()
    if override:
        return {g for g in override if g in PROBE_GROUPS}
    return set(DEFAULT_GROUPS) | set(extra)


class TaskOffsets(msgspec.Struct):
    """Byte offsets of task_struct fields in the running kernel (from its BTF), 0 where unknown."""
    pid: int = 0
    tgid: int = 0
    stack: int = 0
    sum_exec_runtime: int = 0  # of se.sum_exec_runtime


def task_offsets() -> TaskOffsets:
    """The task_struct offsets in the running kernel, from its BTF; all 0 without BTF or bpftool, or with
    VALKEYTRACE_RAW_SCHED=0 (read each call: only the BTF's answer is kept for the process). The raw
    sched_switch/sched_wakeup probes need pid (without it the regular tracepoints are used),
    sched_wakeup_new tgid, the idle cause stack, the alignment with the kernel's own charge of on-CPU
    time sum_exec_runtime."""
    return _kernel_task_offsets() if environment.raw_sched() else TaskOffsets()


@functools.lru_cache(maxsize=1)
def _kernel_task_offsets() -> TaskOffsets:
    """task_offsets() from the BTF. Dumping it takes ~0.25 s, so the result is cached per kernel build."""
    btf = "/sys/kernel/btf/vmlinux"
    if not os.path.exists(btf):
        return TaskOffsets()
    cache = os.path.join(system.cache_dir(), f"task-offsets3-{system.kernel_release()}-{os.stat(btf).st_size}.json")
    try:
        with open(cache, "rb") as f:
            return msgspec.json.decode(f.read(), type=TaskOffsets)
    except (OSError, msgspec.DecodeError):
        pass
    offsets = _btf_task_offsets(btf)
    if offsets.pid or offsets.stack:
        system.write_json_cache(cache, msgspec.structs.asdict(offsets))
    return offsets


def sysnr_cache() -> str:
    """Where the sysnr check (tracers/ebpf.py) keeps the offset it found on this kernel."""
    return os.path.join(system.cache_dir(), f"sysnr-{system.kernel_release()}-{task_offsets().stack}.json")


def sysnr_known() -> bool:
    """Whether a sysnr check on this kernel found the syscall number readable before."""
    try:
        with open(sysnr_cache()) as f:
            return int(json.load(f)["offset"]) in SYSNR_CANDIDATES
    except (OSError, ValueError, KeyError, TypeError):
        return False


def bpftool_path() -> str | None:
    import shutil

    return shutil.which("bpftool") or next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool") if os.path.exists(p)),
                                           None)


def _btf_task_offsets(btf: str) -> TaskOffsets:
    import re
    import subprocess

    tool = bpftool_path()
    if not tool:
        return TaskOffsets()
    try:
        out = subprocess.run([tool, "btf", "dump", "file", btf, "format", "raw"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return TaskOffsets()
    def fields(struct: str, names) -> dict:
        m = re.search(rf"STRUCT '{struct}' size=\d+ vlen=\d+\n((?:\t.*\n)+)", out)
        found = {}
        for field in names if m else ():
            f = re.search(rf"^\t'{field}' type_id=\d+ bits_offset=(\d+)$", m.group(1) if m else "", re.M)
            if f and int(f.group(1)) % 8 == 0:
                found[field] = int(f.group(1)) // 8
        return found

    offsets = fields("task_struct", ("pid", "tgid", "stack", "se"))
    runtime = fields("sched_entity", ("sum_exec_runtime",))
    se = offsets.pop("se", None)
    if se is not None and "sum_exec_runtime" in runtime:
        offsets["sum_exec_runtime"] = se + runtime.pop("sum_exec_runtime")  # task_struct.se.sum_exec_runtime
    return TaskOffsets(**offsets)


def call_log_bits(cpus: int) -> int:
    """log2 of the records each CPU's call log holds (probes/vt_calllog.bpf.h): CALL_LOG_BYTES over the
    CPUs, 1K to 32K records (a second of ~30K calls a CPU between two takes at most; past that, the
    kernel's histograms count the calls)."""
    return max(10, min(15, int(math.log2(CALL_LOG_BYTES // BLOCK_EVENT_DTYPE.itemsize // max(cpus, 1)))))


def probe_defines(*, block_threshold_ns: int, loop_from_epoll: bool, groups=DEFAULT_GROUPS) -> dict:
    """The program's -D parameters: all but the server's pid, which the `target` map holds (one compiled
    program serves every launch: tracers/ebpf_pool.py)."""
    sched = "sched" in groups
    offsets = task_offsets() if sched else TaskOffsets()
    ctime = "fs" in groups and system.tracepoint_exists(*FS_CTIME_START)
    cpus = system.possible_cpus()
    return {"BLOCK_THRESHOLD_NS": block_threshold_ns,
            "LOOP_FROM_EPOLL": int(loop_from_epoll), "RINGBUF_PAGES": RINGBUF_PAGES,
            "CALL_LOG_CPUS": cpus, "CALL_LOG_BITS": call_log_bits(cpus),
            "TRACE_REQUESTS": int("requests" in groups and all(system.tracepoint_exists(c, e)
                                                              for c, e in REQUEST_TRACEPOINTS)),
            "TRACE_SYSCALLS": int("syscalls" in groups),
            "TRACE_FS_SYNC": int("fs" in groups and "syscalls" not in groups),
            "FS_CTIME_START": int(ctime),
            "FS_JOURNAL_START": int("fs" in groups and not ctime and system.tracepoint_exists(*FS_JOURNAL_START)),
            "TRACE_SCHED": int(sched), "TASK_PID_OFFSET": offsets.pid,
            "TASK_TGID_OFFSET": offsets.tgid if offsets.pid else 0, "TASK_RUNTIME_OFFSET": offsets.sum_exec_runtime,
            "TASK_STACK_OFFSET": offsets.stack, "TASK_PT_REGS": int(sched and system.kernel_at_least(5, 15))}


def call_source(syscalls: bool, fs_sync: bool, fstype: str | None, write_sites: bool = True,
                shim_wrappers: bool = False) -> str:
    """How fsyncs and AOF writes were timed, as recordings and reports name it. write_sites: with
    the fs tracepoints, AOF writes begin at their call sites (without the syscall number).
    shim_wrappers: fsyncs were timed at the shim's wrappers (an injected delay is in the figure),
    whatever times the AOF writes."""
    if syscalls:
        source = "syscalls"
    elif not fs_sync:
        source = "call sites"
    else:
        source = f"{fstype} tracepoints + AOF-write call sites" if write_sites else f"{fstype} tracepoints"
    return (f"the shim's wrappers for fsyncs (uprobes; the injected delay included), {source} for AOF writes"
            if shim_wrappers else source)


def printable_program(defines: dict, groups=DEFAULT_GROUPS, pid: int | None = None) -> str:
    """The exact text and flags `record` would load, and its probe groups (for --print-probes)."""
    flags = " ".join(cflags(**defines))
    return (f"// probe groups: {', '.join(g for g in PROBE_GROUPS if g in groups)}\n"
            f"// bcc cflags: {flags}\n"
            f"// the map `target` holds the server's pid{f' ({pid})' if pid else ''}, written at each launch\n"
            + probe_source(MAIN_PROBE))


def cflags(**defines) -> list[str]:
    """-D flags for the probe parameters, plus the include path of the shared layout header."""
    flags = [f"-I{PROBES_DIR}", "-DVT_BPF=1", "-Wno-visibility", "-Wno-macro-redefined"]
    flags += [f"-D{k}={int(v)}" for k, v in defines.items()]
    return flags


@dataclass
class Plan:
    """What start() compiles and attaches, decided from the options and the facts about the
    server: its binary's symbols and the AOF directory's filesystem."""
    groups: set
    loop_addr: int | None  # beforeSleep's address: iterations from its uprobe (else epoll_wait, or INFO only)
    flush_probe: bool
    fstype: str | None
    block_threshold_ns: int
    switches: bool = True  # the scheduler's programs stay attached (record --attach: detached after start-up)

    @property
    def loop_uprobe(self) -> bool:
        return self.loop_addr is not None

    @property
    def fs_sync(self) -> bool:
        return "fs" in self.groups

    def fall_back_to_syscalls(self):
        """No usable call sites: the calls come from the syscall tracepoints instead."""
        self.groups.add("syscalls")
        self.groups.discard("fs")

    def defines(self) -> dict:
        return probe_defines(block_threshold_ns=self.block_threshold_ns,
                             loop_from_epoll=not self.loop_uprobe and "loop" in self.groups, groups=self.groups)


def plan(*, extra_groups=(), block_threshold_ns: int, symbol, fstype: str | None, fs_tracepoints_present,
         attached: bool = False) -> Plan:
    """The probe plan. symbol(name): the function's address in the server binary or None (asked
    only for the groups that need one); fs_tracepoints_present(fstype, names): whether the kernel
    has those tracepoints. attached (record --attach): the scheduler's programs are loaded and run for
    the start-up check only (the syscall number's offset: ext4's tracepoints then begin AOF writes, no
    uprobe), then detached: no program on every context switch and wake-up of the machine (on a server
    someone else runs they were three quarters of the tracer's BPF time, ~170 ns a request); the threads'
    on-CPU time and wait for a CPU come from the kernel's own schedstat instead (VALKEYTRACE_PROBES
    keeps them)."""
    groups = probe_groups(tuple(extra_groups))
    switches = not (attached and environment.probe_groups_override() is None)
    loop_addr = symbol(LOOP_SYMBOL) if "loop" in groups else None
    if "loop" in groups and loop_addr is None:
        groups.add("syscalls")  # iterations from epoll_wait; the syscalls time the calls too
    fs_tps: tuple = FS_TRACEPOINTS.get(fstype or "", ())
    if "syscalls" in groups or not fs_tps or not fs_tracepoints_present(fstype, fs_tps):
        groups.discard("fs")  # the fsyncs are timed at their call sites (or syscalls) instead
    return Plan(groups=groups, loop_addr=loop_addr,
                flush_probe="flush" in groups and symbol(FLUSH_SYMBOL) is not None,
                fstype=fstype, block_threshold_ns=block_threshold_ns, switches=switches or "sched" not in groups)


def extra_groups(aof_flush_probe: bool = False, loop_sample: bool = False, socket_writes: bool = False) -> tuple:
    """The groups the record options add to the defaults."""
    return tuple(g for g, on in (("flush", aof_flush_probe), ("loop", loop_sample), ("syscalls", socket_writes)) if on)


def uprobes(binary: str, p: Plan, call_sites: list, shim_library: str | None, loop_duty: float) -> tuple[Uprobe | None, list[Uprobe], bool]:
    """(the sampled loop probe or None, the uprobes attached throughout, whether the shim's
    wrappers are probed) for a plan and the call sites found in the binary."""
    fs_sync, syscalls = p.fs_sync, "syscalls" in p.groups
    # beforeSleep runs 80K-850K times a second with I/O threads (valkey 9); one uprobe hit each is
    # a large part of the main thread (docs/performance.md), so the probe is attached for a
    # fraction of the time (a sample of iterations: their distribution) and the count comes from
    # the server's own INFO eventloop_cycles when it has it
    loop = Uprobe(binary, "on_before_sleep", addr=p.loop_addr) if p.loop_uprobe else None
    sampled = loop if loop and loop_duty < 1.0 else None
    always = [loop] if loop and not sampled else []
    if p.flush_probe:
        always += [Uprobe(binary, "on_flush_enter", sym=FLUSH_SYMBOL),
                   Uprobe(binary, "on_flush_return", sym=FLUSH_SYMBOL, ret=True)]
    for site in call_sites:
        always.append(Uprobe(binary, f"on_site_{site.kind}", addr=site.call))
        if not fs_sync:  # with the fs tracepoints, ext4's write_end ends an AOF write
            always.append(Uprobe(binary, "on_site_exit", addr=site.exit))
    shim_probes = bool(shim_library) and (syscalls or fs_sync)
    if shim_probes:  # with call sites, the site times the shim's wrapper
        for sym, fn in SHIM_SYMBOLS.items():
            always += [Uprobe(str(shim_library), fn, sym=sym),
                       Uprobe(str(shim_library), "on_shim_sync_return", sym=sym, ret=True)]
    return sampled, always, shim_probes


def aof_dir_of(target) -> str:
    """The server's AOF directory (its `dir`, relative to its cwd, and `appenddirname`)."""
    cfg = target.describe()["config"]
    base = cfg.get("dir") or "."
    if not os.path.isabs(base):
        base = os.path.join(os.path.realpath(f"/proc/{target.pid}/cwd"), base)
    return os.path.join(base, cfg.get("appenddirname") or "")
