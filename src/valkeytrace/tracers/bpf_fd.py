"""A loaded BPF program held by its file descriptors: the tracer's side of a compile done in a child process
(tracers/bcc_child.py). bcc's compiler (clang and LLVM, ~60 MB to import and ~60-90 MB more to compile)
never enters the long-lived tracer: it gets the programs' and maps' fds and attaches, reads and detaches them
through bcc's own small syscall library (libbcc_bpf.so.0, which has no LLVM), with the names bcc's BPF
object uses, so the tracer reads the same whichever process compiled."""
from __future__ import annotations

import ctypes as ct
import os
import re
from dataclasses import dataclass

from valkeytrace.tracers import elf

BPF_MAP_TYPE_HASH = 1
BPF_PROBE_ENTRY, BPF_PROBE_RETURN = 0, 1
_lib = None


class BpfError(Exception):
    """An attach, detach or lookup this module could not do (bcc's own BPF object raises a bare Exception for
    the same: callers that catch Exception still catch this; a fallback catches it by name)."""


def lib():
    """libbcc_bpf.so.0 (Debian's libbpfcc, beside python3-bpfcc): bpf(2) map calls, attach, ring buffers."""
    global _lib
    if _lib is None:
        so = ct.CDLL("libbcc_bpf.so.0", use_errno=True)
        for name, res, args in (
                ("bpf_lookup_elem", ct.c_int, [ct.c_int, ct.c_void_p, ct.c_void_p]),
                ("bpf_update_elem", ct.c_int, [ct.c_int, ct.c_void_p, ct.c_void_p, ct.c_ulonglong]),
                ("bpf_delete_elem", ct.c_int, [ct.c_int, ct.c_void_p]),
                ("bpf_get_next_key", ct.c_int, [ct.c_int, ct.c_void_p, ct.c_void_p]),
                ("bpf_attach_tracepoint", ct.c_int, [ct.c_int, ct.c_char_p, ct.c_char_p]),
                ("bpf_attach_raw_tracepoint", ct.c_int, [ct.c_int, ct.c_char_p]),
                ("bpf_attach_uprobe", ct.c_int, [ct.c_int, ct.c_int, ct.c_char_p, ct.c_char_p, ct.c_uint64,
                                                 ct.c_int, ct.c_uint32]),
                ("bpf_detach_uprobe", ct.c_int, [ct.c_char_p]),
                ("bpf_close_perf_event_fd", ct.c_int, [ct.c_int]),
                ("bpf_new_ringbuf", ct.c_void_p, [ct.c_int, ct.c_void_p, ct.c_void_p]),
                ("bpf_consume_ringbuf", ct.c_int, [ct.c_void_p]),
                ("bpf_free_ringbuf", None, [ct.c_void_p]),
                ("bcc_create_map", ct.c_int, [ct.c_int, ct.c_char_p, ct.c_int, ct.c_int, ct.c_int, ct.c_int]),
                ("bcc_prog_load", ct.c_int, [ct.c_int, ct.c_char_p, ct.c_void_p, ct.c_int, ct.c_char_p, ct.c_uint,
                                             ct.c_int, ct.c_char_p, ct.c_uint])):
            fn = getattr(so, name)
            fn.restype, fn.argtypes = res, args
        _lib = so
    return _lib


class Map:
    """One map by its fd; keys are integers of the map's key size, values integers or raw bytes."""

    def __init__(self, name: str, fd: int, key_size: int, value_size: int, max_entries: int, kind: int):
        self.name, self.map_fd, self.key_size, self.value_size = name, fd, key_size, value_size
        self.max_entries, self.kind = max_entries, kind

    def _key(self, key: int):
        return ct.create_string_buffer(int(key).to_bytes(self.key_size, "little"), self.key_size)

    def raw(self, key: int) -> bytes | None:
        """The value at key as bytes, or None (no such key)."""
        buf = ct.create_string_buffer(self.value_size)
        return buf.raw if lib().bpf_lookup_elem(self.map_fd, self._key(key), buf) == 0 else None

    def value(self, key: int = 0) -> int:
        """The value at key as an unsigned integer (0 when absent)."""
        got = self.raw(key)
        return int.from_bytes(got, "little") if got is not None else 0

    def put(self, key: int, value: int | bytes = 0) -> None:
        data = value if isinstance(value, bytes) else int(value).to_bytes(self.value_size, "little")
        buf = ct.create_string_buffer(data, self.value_size)
        if lib().bpf_update_elem(self.map_fd, self._key(key), buf, 0) < 0:
            raise OSError(ct.get_errno(), f"cannot update BPF map {self.name}")

    def delete(self, key: int) -> None:
        lib().bpf_delete_elem(self.map_fd, self._key(key))

    def keys(self) -> list[int]:
        out, prev, nxt = [], None, ct.create_string_buffer(self.key_size)
        while lib().bpf_get_next_key(self.map_fd, prev, nxt) == 0:
            out.append(int.from_bytes(nxt.raw, "little"))
            prev = ct.create_string_buffer(nxt.raw, self.key_size)
        return out

    def clear(self) -> None:
        """A hash emptied, an array's every element zeroed."""
        if self.kind == BPF_MAP_TYPE_HASH:
            for k in self.keys():
                self.delete(k)
        else:
            for k in range(self.max_entries):
                self.put(k, 0)


@dataclass
class Function:
    name: bytes
    fd: int


def _evname(prefix: bytes, path: bytes, offset: int, pid: int) -> bytes:
    return b"%s_%s_0x%x_%d" % (prefix, re.sub(rb"[^a-zA-Z0-9_]", b"_", path), offset, pid)


class Program:
    """The compiled program by fd: the subset of bcc's BPF object the tracer uses, same names. It owns the
    fds it is given from the start: when an attach on load fails, it closes them all (and detaches what it
    had attached) before raising."""

    def __init__(self, funcs: dict[bytes, int], maps: list[Map], autoload: list[bytes]):
        self.funcs = {name: Function(name, fd) for name, fd in funcs.items()}
        self.tables = {m.name.encode(): m for m in maps}
        self.tracepoint_fds: dict[bytes, int] = {}
        self.raw_tracepoint_fds: dict[bytes, int] = {}
        self.uprobe_fds: dict[bytes, int] = {}
        self.attached: dict[bytes, set[str]] = {}  # program -> every point it has been attached to since the load
        self._ringbuf = None
        self.compile_peak_rss_mb: float | None = None  # the compiling child's peak (bcc_child)
        self.program_from = "compiler"  # or "cache" (tracers/bpf_cache.py)
        try:
            for name in autoload:  # what bcc attaches on load
                if name.startswith(b"tracepoint__"):
                    self.attach_tracepoint(tp=name[len(b"tracepoint__"):].replace(b"__", b":", 1), fn_name=name)
                elif name.startswith(b"raw_tracepoint__"):
                    self.attach_raw_tracepoint(tp=name[len(b"raw_tracepoint__"):], fn_name=name)
        except BaseException:
            self.cleanup()  # the program owns every fd it was given: a failed attach leaves nothing attached or open
            raise

    def __getitem__(self, name: bytes) -> Map:
        return self.tables[name]  # KeyError: a map not compiled in

    def _fd(self, fn_name: bytes) -> int:
        if fn_name not in self.funcs:
            raise BpfError(f"no BPF function {fn_name.decode()} in the program")
        return self.funcs[fn_name].fd

    def load_func(self, fn_name: bytes, _kind=None) -> Function:
        """Every function was loaded by the compiling child: the one asked for."""
        self._fd(fn_name)
        return self.funcs[fn_name]

    def attach_tracepoint(self, tp: bytes, fn_name: bytes) -> None:
        category, event = tp.split(b":", 1)
        fd = lib().bpf_attach_tracepoint(self._fd(fn_name), category, event)
        if fd < 0:
            raise BpfError(f"failed to attach BPF program {fn_name.decode()} to tracepoint {tp.decode()}")
        self.tracepoint_fds[tp] = fd
        self.attached.setdefault(fn_name, set()).add("tracepoint:" + tp.decode())

    def detach_tracepoint(self, tp: bytes) -> None:
        lib().bpf_close_perf_event_fd(self.tracepoint_fds.pop(tp))

    def attach_raw_tracepoint(self, tp: bytes, fn_name: bytes) -> None:
        if tp in self.raw_tracepoint_fds:
            raise BpfError(f"raw tracepoint {tp.decode()} is attached already")
        fd = lib().bpf_attach_raw_tracepoint(self._fd(fn_name), tp)
        if fd < 0:
            raise BpfError(f"failed to attach BPF program {fn_name.decode()} to raw tracepoint {tp.decode()}")
        self.raw_tracepoint_fds[tp] = fd
        self.attached.setdefault(fn_name, set()).add("raw_tracepoint:" + tp.decode())

    def detach_raw_tracepoint(self, tp: bytes) -> None:
        os.close(self.raw_tracepoint_fds.pop(tp))

    @staticmethod
    def _where(name: bytes, sym: bytes = b"", addr: int | None = None) -> int:
        path = name.decode()
        if addr is None:
            addr = elf.symbol_address(path, sym.decode())
            if addr is None:
                raise BpfError(f"could not determine address of symbol {sym.decode()} in {path}")
        return elf.file_offset(path, addr)

    def _attach_u(self, kind: int, name: bytes, fn_name: bytes, pid: int, sym: bytes, addr: int | None) -> None:
        offset = self._where(name, sym, addr)
        ev = _evname(b"r" if kind == BPF_PROBE_RETURN else b"p", name, offset, pid)
        fd = lib().bpf_attach_uprobe(self._fd(fn_name), kind, ev, name, offset, pid, 0)
        if fd < 0:
            raise BpfError(f"failed to attach BPF to uprobe {name.decode()}:{offset:#x}")
        self.uprobe_fds[ev] = fd
        self.attached.setdefault(fn_name, set()).add("uprobe")

    def _detach_u(self, prefix: bytes, name: bytes, pid: int, sym: bytes, addr: int | None) -> None:
        ev = _evname(prefix, name, self._where(name, sym, addr), pid)
        if ev not in self.uprobe_fds:
            raise BpfError(f"uprobe {ev.decode()} is not attached")
        lib().bpf_close_perf_event_fd(self.uprobe_fds.pop(ev))
        lib().bpf_detach_uprobe(ev)

    def attach_uprobe(self, name: bytes, fn_name: bytes, pid: int = -1, sym: bytes = b"", addr=None) -> None:
        self._attach_u(BPF_PROBE_ENTRY, name, fn_name, pid, sym, addr)

    def attach_uretprobe(self, name: bytes, fn_name: bytes, pid: int = -1, sym: bytes = b"", addr=None) -> None:
        self._attach_u(BPF_PROBE_RETURN, name, fn_name, pid, sym, addr)

    def detach_uprobe(self, name: bytes, pid: int = -1, sym: bytes = b"", addr=None) -> None:
        self._detach_u(b"p", name, pid, sym, addr)

    def detach_uretprobe(self, name: bytes, pid: int = -1, sym: bytes = b"", addr=None) -> None:
        self._detach_u(b"r", name, pid, sym, addr)

    def open_ring_buffer(self, table: bytes, callback: int, ctx: int) -> None:
        """The ring buffer map drained by a C callback (its address) with ctx, on ring_buffer_consume()."""
        if self._ringbuf is not None:
            raise BpfError("one ring buffer per program")
        self._ringbuf = lib().bpf_new_ringbuf(self[table].map_fd, callback, ctx)
        if not self._ringbuf:
            raise BpfError("cannot open the BPF ring buffer")

    def ring_buffer_consume(self) -> None:
        if self._ringbuf:
            lib().bpf_consume_ringbuf(self._ringbuf)

    def cleanup(self) -> None:
        """Everything detached and closed: the kernel unloads the programs and maps."""
        for ev in list(self.uprobe_fds):
            lib().bpf_close_perf_event_fd(self.uprobe_fds.pop(ev))
            lib().bpf_detach_uprobe(ev)
        for tp in list(self.tracepoint_fds):
            self.detach_tracepoint(tp)
        for tp in list(self.raw_tracepoint_fds):
            self.detach_raw_tracepoint(tp)
        if self._ringbuf:
            lib().bpf_free_ringbuf(self._ringbuf)
            self._ringbuf = None
        for fd in [f.fd for f in self.funcs.values()] + [m.map_fd for m in self.tables.values()]:
            try:
                os.close(fd)
            except OSError:
                pass
        self.funcs, self.tables = {}, {}
