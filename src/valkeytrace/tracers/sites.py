"""Call sites in a valkey-server binary where it calls fdatasync/fsync, and where its AOF code
calls write(2): the eBPF backend times these calls with a pair of uprobes on the server's own code
instead of tracing syscalls.

Why: on this kernel, enabling any syscall tracepoint (per-syscall or raw) sends every syscall of
every process on the machine through the slow entry/exit path; measured here that alone costs
a measurable part of GET throughput (docs/performance.md) (the benchmark clients make most of the syscalls), whatever the program
does. A uprobe costs only when the traced process reaches the probed instruction, and only about
0.7 µs when the kernel can emulate that instruction (direct call, jmp, jcc) instead of
single-stepping it out of line (~9 µs).

So each site is a pair: the `call` instruction itself (entry: emulated), and the first direct
branch on the straight-line path after it returns (exit: emulated; the few instructions in
between, typically `test %rax,%rax`, are part of the measured time). When no such branch follows
within a few instructions, the exit probe goes on the return address (single-stepped, slower) and
the site says so.

The disassembly comes from binutils' objdump (0.4 s for valkey-server), cached per binary.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass

from valkeytrace import system

SYNC_CALLEES = ("fdatasync", "fsync")
WRITE_CALLEES = ("write",)
# functions whose write(2) calls are AOF writes (valkey/redis aof.c; aofWrite is often inlined
# into flushAppendOnlyFile, which then calls write itself)
AOF_WRITERS = ("flushAppendOnlyFile", "aofWrite")
EXIT_SCAN = 12  # instructions after the return address searched for an emulated branch
CACHE_VERSION = 2

_INSN = re.compile(r"^\s*([0-9a-f]+):\t(.*)$")
_TARGET = re.compile(r"^([0-9a-f]+) <([^>+]+)(?:\+0x[0-9a-f]+)?>$")
_PREFIXES = ("bnd", "notrack", "lock", "rep", "repz", "repnz", "data16", "cs", "ds")


@dataclass(frozen=True)
class CallSite:
    kind: str          # "fdatasync" | "fsync" | "aof_write"
    call: int          # virtual address of the call instruction (entry probe)
    exit: int          # virtual address of the exit probe
    exit_emulated: bool
    function: str      # the global function containing the site, "" when unknown
    ret: int = 0       # the return address


def _split(text: str) -> tuple[str, str]:
    parts = text.split(None, 1)
    while parts and parts[0] in _PREFIXES and len(parts) > 1:
        parts = parts[1].split(None, 1)
    if not parts:
        return "", ""
    return parts[0], (parts[1].strip() if len(parts) > 1 else "")


def _is_direct_branch(mnem: str, ops: str) -> bool:
    """jmp/jcc/call to an immediate target: what x86 uprobes emulate without single-stepping."""
    if ops.startswith("*") or not mnem.startswith(("j", "call")):
        return False
    if mnem in ("jrcxz", "jecxz", "jcxz"):
        return False
    return bool(_TARGET.match(ops))


def _callee(ops: str) -> str | None:
    m = _TARGET.match(ops)
    if not m:
        return None
    name = m.group(2)
    return name[:-4] if name.endswith("@plt") else name


def _functions(binary: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of the binary's defined functions with a size (nm -S)."""
    tool = shutil.which("nm")
    if not tool:
        return []
    out = subprocess.run([tool, "-S", "--defined-only", binary], capture_output=True, text=True, timeout=30).stdout
    funcs = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            start, size = int(parts[0], 16), int(parts[1], 16)
            funcs.append((start, start + size, parts[3]))
    return funcs


def scan(disassembly: str, functions: list[tuple[int, int, str]]) -> list[CallSite]:
    """Call sites in objdump -d output (pure function: tested on canned text)."""
    addrs: list[int] = []
    insns: list[tuple[str, str]] = []
    for line in disassembly.splitlines():
        m = _INSN.match(line)
        if not m:
            continue
        mnem, ops = _split(m.group(2))
        if not mnem or mnem.startswith("("):  # "(bad)"
            continue
        addrs.append(int(m.group(1), 16))
        insns.append((mnem, ops))
    aof_ranges = [(s, e) for s, e, name in functions if name in AOF_WRITERS]
    sites = []
    for i, (mnem, ops) in enumerate(insns):
        if mnem != "call" or ops.startswith("*"):
            continue
        callee = _callee(ops)
        if callee in SYNC_CALLEES:
            kind = callee
        elif callee in WRITE_CALLEES and any(s <= addrs[i] < e for s, e in aof_ranges):
            kind = "aof_write"
        else:
            continue
        if i + 1 >= len(insns):
            continue
        exit_addr, emulated = addrs[i + 1], False
        for j in range(i + 1, min(i + 1 + EXIT_SCAN, len(insns))):
            m2, o2 = insns[j]
            if _is_direct_branch(m2, o2):
                exit_addr, emulated = addrs[j], True
                break
            if m2.startswith(("j", "call", "ret", "hlt", "ud2", "int", "syscall")):
                break  # indirect branch or end of the straight line: exit on the return address
        function = next((name for s, e, name in functions if s <= addrs[i] < e), "")
        sites.append(CallSite(kind, addrs[i], exit_addr, emulated, function, addrs[i + 1]))
    # an exit on another site's call instruction would race with that site's entry probe
    calls = {s.call for s in sites}
    return [CallSite(s.kind, s.call, s.ret, False, s.function, s.ret) if s.exit in calls else s for s in sites]


def _cache_path(binary: str) -> str:
    st = os.stat(binary)
    key = hashlib.sha256(f"{CACHE_VERSION}:{os.path.realpath(binary)}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
                         .encode()).hexdigest()[:24]
    return os.path.join(system.cache_dir(), "sites", key + ".json")


class SiteFinder:
    """Runs objdump in the background (started at construction), so disassembly overlaps the
    probe compile; result() returns the sites (cached per binary across runs)."""

    def __init__(self, binary: str):
        self.binary = binary
        self._proc = None
        self._sites: list[CallSite] | None = None
        self.error: str | None = None
        try:
            self._cache = _cache_path(binary)
            with open(self._cache) as f:
                self._sites = [CallSite(**s) for s in json.load(f)]
            return
        except (OSError, ValueError, TypeError):
            pass
        tool = shutil.which("objdump")
        if tool is None:
            self.error = "objdump (binutils) is not installed"
            self._sites = []
            return
        self._proc = subprocess.Popen([tool, "-d", "--no-show-raw-insn", "-j", ".text", binary],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self) -> list[CallSite]:
        if self._sites is not None:
            return self._sites
        if self._proc is None:  # no objdump to run: start() said why
            self._sites = []
            return self._sites
        out, err = self._proc.communicate(timeout=60)
        if self._proc.returncode != 0:
            self.error = f"objdump failed: {err.strip().splitlines()[-1] if err.strip() else self._proc.returncode}"
            self._sites = []
            return self._sites
        self._sites = scan(out, _functions(self.binary))
        system.write_json_cache(self._cache, [asdict(s) for s in self._sites])
        return self._sites

    def cancel(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def usable(sites: list[CallSite], need_sync: bool = True) -> bool:
    """Enough to time the AOF path: one AOF write site, and one fsync-family site unless the
    fsyncs are timed elsewhere (need_sync False: the ext4 sync tracepoints)."""
    kinds = {s.kind for s in sites}
    return "aof_write" in kinds and (not need_sync or bool(kinds & {"fdatasync", "fsync"}))
