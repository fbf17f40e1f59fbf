"""Compiled probes kept on disk and loaded again without a compiler: compile once per machine.

bcc compiles a program with clang in a child (tracers/bcc_child.py): 1.2 s of a CPU and ~150 MB, on every
eBPF `record`'s critical path. The child also writes what it loaded to this cache: each function's
instructions (as bcc handed them to the kernel, map references as the child's map fds), its program type,
and each map's definition. A later tracer with the same program text, flags, kernel, kernel headers and
bcc creates fresh maps, points the instructions' map references at them (an ld_imm64 whose source is
BPF_PSEUDO_MAP_FD or BPF_PSEUDO_MAP_VALUE) and loads the functions through the kernel's verifier again,
with bcc's own syscall library (tracers/bpf_fd.py): no clang, no child. An entry that does not load (a
kernel that changed under the same release) is removed and the program compiled again.

The cache is code that root loads into the kernel: it is used only where the directory and the file are
owned by this user and writable by nobody else (bpf/ in valkeytrace's cache directory,
$XDG_CACHE_HOME/valkeytrace or ~/.cache/valkeytrace); VALKEYTRACE_BPF_CACHE names another directory, or `off`.
"""
from __future__ import annotations

import ctypes as ct
import hashlib
import os
import stat
from pathlib import Path

import msgspec

FORMAT = 1
MAX_ENTRIES = 64  # entries kept (each ~35 KB): one for each plan a machine records with; the oldest go
LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW: two instruction slots
PSEUDO_MAP_FD, PSEUDO_MAP_VALUE = 1, 2
PROG_KPROBE, PROG_TRACEPOINT, PROG_RAW_TRACEPOINT = 2, 5, 17  # enum bpf_prog_type (uprobes are kprobe-typed)


class CachedFunction(msgspec.Struct):
    name: str
    prog_type: int
    insns: bytes


class CachedMap(msgspec.Struct):
    name: str
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    fd: int  # the compiling child's: what the instructions refer to


class Entry(msgspec.Struct):
    format: int
    license: str
    kern_version: int
    functions: list[CachedFunction]
    maps: list[CachedMap]
    autoload: list[str]  # what bcc attached on load (bpf_fd.Program attaches the same)


def directory() -> Path | None:
    """Where entries are kept (bpf/ beside the what-if's cache unless the environment names another:
    environment.bpf_cache_dir), or None."""
    from valkeytrace import environment

    d = environment.bpf_cache_dir()
    return None if d is None else Path(d)


def private(path: Path) -> bool:
    """Owned by this user and writable by no one else (the cache's content is loaded into the kernel)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) \
        and not stat.S_ISLNK(st.st_mode)


def _loaded_library(fragment: str) -> str:
    """The real path of a shared library this process has mapped ('' when none)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if fragment in os.path.basename(path):
                    return os.path.realpath(path)
    except OSError:
        pass
    return ""


def key(text: bytes, cflags, raw_functions) -> str:
    """What a compiled program depends on: its text and flags, what is loaded as a raw tracepoint, the
    kernel (release, build), the headers it was compiled against, bcc (its library's versioned name)."""
    from valkeytrace.tracers import bpf_fd

    bpf_fd.lib()  # mapped: its versioned file name is bcc's version
    uname = os.uname()
    parts = [str(FORMAT).encode(), text, "\0".join(cflags).encode(), "\0".join(sorted(raw_functions)).encode(),
             uname.release.encode(), uname.version.encode(), uname.machine.encode(),
             os.path.realpath(f"/lib/modules/{uname.release}/build").encode(), _loaded_library("libbcc_bpf.so").encode()]
    return hashlib.sha256(b"\0\0".join(parts)).hexdigest()


def _path(k: str) -> Path | None:
    d = directory()
    return None if d is None else d / f"{k}.vtbpf"


def store(k: str, entry: Entry) -> None:
    """Keep an entry (the compiling child calls this); a cache that cannot be written is no error."""
    path = _path(k)
    if path is None:
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private(path.parent):
            return
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.msgpack.encode(entry))
        os.replace(tmp, path)  # whole or not at all: another tracer may be reading
        entries = sorted(path.parent.glob("*.vtbpf"), key=lambda p: p.stat().st_mtime)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink()
    except OSError:
        return


def relocate(insns: bytes, fds: dict[int, int]) -> bytes:
    """The instructions with each map reference moved from the compiling child's fd to ours (ValueError
    on a reference this cache cannot move: then the program is compiled)."""
    out = bytearray(insns)
    i = 0
    while i + 8 <= len(out):
        if out[i] == LD_IMM64:
            src = out[i + 1] >> 4
            if src in (PSEUDO_MAP_FD, PSEUDO_MAP_VALUE):
                old = int.from_bytes(out[i + 4:i + 8], "little", signed=True)
                if old not in fds:
                    raise ValueError(f"a reference to map fd {old}, not in the entry")
                out[i + 4:i + 8] = fds[old].to_bytes(4, "little", signed=True)
            elif src != 0:
                raise ValueError(f"an ld_imm64 of source {src}")
            i += 16
        else:
            i += 8
    return bytes(out)


def _load_entry(entry: Entry, opened: list[int]):
    from valkeytrace.tracers import bpf_fd

    so, fds, maps, funcs = bpf_fd.lib(), {}, [], {}
    for m in entry.maps:
        fd = so.bcc_create_map(m.map_type, m.name.encode(), m.key_size, m.value_size, m.max_entries, m.flags)
        if fd < 0:
            raise OSError(ct.get_errno(), f"map {m.name} not created")
        opened.append(fd)
        fds[m.fd] = fd
        maps.append(bpf_fd.Map(m.name, fd, m.key_size, m.value_size, m.max_entries, m.map_type))
    for fn in entry.functions:
        insns = relocate(fn.insns, fds)
        fd = so.bcc_prog_load(fn.prog_type, fn.name.encode(), insns, len(insns), entry.license.encode(),
                              entry.kern_version, 0, None, 0)
        if fd < 0:
            raise OSError(ct.get_errno(), f"function {fn.name} not loaded")
        opened.append(fd)
        funcs[fn.name.encode()] = fd
    for fd in opened:
        os.set_inheritable(fd, False)
    opened.clear()  # the Program owns them now: one whose attach on load fails closes them itself
    return bpf_fd.Program(funcs, maps, [n.encode() for n in entry.autoload])


def load(k: str):
    """The program of this key loaded from the cache (a bpf_fd.Program), or None: no entry, one that
    is not private, or one that does not load or whose attach on load fails (removed, every fd it opened
    closed: the caller compiles and stores it again)."""
    from valkeytrace.tracers import bpf_fd

    path = _path(k)
    if path is None or not private(path.parent) or not private(path):
        return None
    opened: list[int] = []  # the fds made so far, until the Program owns them
    try:
        entry = msgspec.msgpack.decode(path.read_bytes(), type=Entry)
        if entry.format != FORMAT:
            raise ValueError(f"format {entry.format}")
        program = _load_entry(entry, opened)
    except (OSError, ValueError, msgspec.DecodeError, bpf_fd.BpfError):  # BpfError: an attach on load failed
        for fd in opened:
            os.close(fd)
        try:
            path.unlink()
        except OSError:
            pass
        return None
    try:
        os.utime(path)  # used: the last to go when the cache is pruned
    except OSError:
        pass  # removed meanwhile by another tracer's pruning: the program is loaded all the same
    return program
