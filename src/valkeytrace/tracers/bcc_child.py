"""The probes compiled in a short-lived child process, handed back as file descriptors.

bcc's compiler is clang and LLVM in the process that imports it: ~60 MB resident to import, as much again to
compile, and a process's peak resident memory never comes down. So the tracer never imports bcc: it starts
`python -m valkeytrace.tracers.bcc_child`, sends it the program text and flags over a SOCK_SEQPACKET socket
pair, and the child compiles with bcc, loads every function (the kernel's verifier runs there), and sends
back the programs' and maps' fds (SCM_RIGHTS) with what each is; then it exits, and the programs live on
through the tracer's fds (tracers/bpf_fd.py). What the child attached on load closes with it: the tracer
attaches the same itself.
"""
from __future__ import annotations

import array
import errno
import os
import socket
import subprocess
import sys
import tempfile

import msgspec

MAX_MESSAGE = 1 << 20
MAX_FDS = 250  # SCM_MAX_FD is 253 per message
FD_SIZE = array.array("i").itemsize
TIMEOUT_S = 120.0


class Request(msgspec.Struct):
    text: str
    cflags: list[str]
    raw: list[str]  # the functions to load as raw tracepoints (the rest not attached on load: uprobes)
    cache_key: str | None = None  # where the child keeps what it loaded (tracers/bpf_cache.py), or None


class Table(msgspec.Struct):
    name: str
    key_size: int
    value_size: int
    max_entries: int
    type: int


class Reply(msgspec.Struct):
    funcs: list[str] = []      # their fds first, then the tables'
    tables: list[Table] = []
    autoload: list[str] = []   # what bcc attached on load
    peak_rss_mb: float | None = None
    error: str | None = None


def compile_program(text: bytes, cflags: list[str], raw_functions=(), cache: bool = True):
    """The program loaded from the compile cache (tracers/bpf_cache.py: program_from "cache"), else
    compiled and loaded by a child ("compiler"; it stores it in the cache): a bpf_fd.Program, its tracepoints
    attached as bcc attaches them on load. Raises Exception with the compiler's first error line."""
    from valkeytrace.tracers import bpf_cache, bpf_fd

    key = bpf_cache.key(text, cflags, raw_functions) if cache else None
    cached = bpf_cache.load(key) if key else None
    if cached is not None:
        cached.program_from = "cache"
        return cached

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "valkeytrace.tracers.bcc_child", str(theirs.fileno())],
                                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        theirs.close()
        ours.settimeout(TIMEOUT_S)
        try:
            ours.send(msgspec.json.encode(Request(text.decode(), list(cflags), list(raw_functions), key)))
            data, fds = receive(ours)
        except OSError as exc:
            data, fds = b"", []
            proc.kill()
            err.write(f"\n{exc}".encode())
        proc.wait()
        reply = _decoded(data, fds)
        if not reply.funcs:
            _close(fds)
            err.seek(0)
            lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
            clang = next((ln.strip() for ln in lines if "error:" in ln), None)  # the compiler's own first error
            why = ", ".join(w for w in (reply.error, clang) if w) \
                or (lines[-1] if lines else f"the compiling child exited with {proc.returncode}")
            raise Exception(why)
    funcs = {name.encode(): fd for name, fd in zip(reply.funcs, fds)}
    maps = [bpf_fd.Map(t.name, fd, t.key_size, t.value_size, t.max_entries, t.type)
            for t, fd in zip(reply.tables, fds[len(funcs):])]
    program = bpf_fd.Program(funcs, maps, [n.encode() for n in reply.autoload])  # on a failed attach it closes them
    program.compile_peak_rss_mb = reply.peak_rss_mb
    program.program_from = "compiler"
    return program


def _close(fds) -> None:
    for fd in fds:
        os.close(fd)


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the fds it carries, close-on-exec from their arrival (no process we start may hold the
    programs). A message cut short (its bytes or its fds: MSG_TRUNC, MSG_CTRUNC) closes the fds that came
    and raises OSError."""
    data, ancillary, flags, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * FD_SIZE), socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, blob in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += array.array("i", blob[:len(blob) - len(blob) % FD_SIZE])
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        _close(fds)
        raise OSError(errno.EMSGSIZE, f"the compiling child's reply was cut short ({len(data)} bytes, {len(fds)} "
                      f"fds received; at most {MAX_MESSAGE} bytes and {MAX_FDS} fds)")
    return data, fds


def _decoded(data: bytes, fds: list[int]) -> Reply:
    """The child's reply: one whose fds are not one per function and table, or that does not decode, closes
    them and is an error reply."""
    try:
        reply = msgspec.json.decode(data, type=Reply) if data else Reply()
    except msgspec.DecodeError as exc:
        return Reply(error=f"the compiling child's reply could not be read ({exc})")
    if reply.funcs and len(fds) != len(reply.funcs) + len(reply.tables):
        return Reply(error=f"the compiling child sent {len(fds)} fds for {len(reply.funcs)} functions and "
                           f"{len(reply.tables)} maps")
    return reply


def _compile(request: Request) -> tuple[Reply, list[int]]:
    import ctypes as ct

    from bcc import BPF, libbcc

    from valkeytrace.system import peak_rss_kb

    lib = libbcc.lib
    for name, res, args in (("bpf_num_tables", ct.c_ulonglong, [ct.c_void_p]),
                            ("bpf_table_name", ct.c_char_p, [ct.c_void_p, ct.c_ulonglong]),
                            ("bpf_table_fd_id", ct.c_int, [ct.c_void_p, ct.c_ulonglong]),
                            ("bpf_table_key_size_id", ct.c_size_t, [ct.c_void_p, ct.c_ulonglong]),
                            ("bpf_table_leaf_size_id", ct.c_size_t, [ct.c_void_p, ct.c_ulonglong])):
        getattr(lib, name).restype, getattr(lib, name).argtypes = res, args
    bpf = BPF(text=request.text.encode(), cflags=request.cflags)
    raw = {name.encode() for name in request.raw}
    for i in range(lib.bpf_num_functions(bpf.module)):
        name = lib.bpf_function_name(bpf.module, i)
        if name not in bpf.funcs:  # uprobes (kprobe-typed) and the raw tracepoints attached per window
            bpf.load_func(name, BPF.RAW_TRACEPOINT if name in raw else BPF.KPROBE)
    funcs = sorted(bpf.funcs.items())
    mod = bpf.module
    ids = [i for i in range(lib.bpf_num_tables(mod)) if lib.bpf_table_fd_id(mod, i) >= 0]
    tables = [Table(lib.bpf_table_name(mod, i).decode(), lib.bpf_table_key_size_id(mod, i),
                    lib.bpf_table_leaf_size_id(mod, i), lib.bpf_table_max_entries_id(mod, i),
                    lib.bpf_table_type_id(mod, i)) for i in ids]
    reply = Reply([n.decode() for n, _ in funcs], tables,
                  [n.decode() for n, _ in funcs if n.startswith((b"tracepoint__", b"raw_tracepoint__"))],
                  round(peak_rss_kb() / 1024, 1))
    if request.cache_key:
        _keep(request.cache_key, bpf, raw, reply, ids)
    return reply, [fn.fd for _, fn in funcs] + [lib.bpf_table_fd_id(mod, i) for i in ids]


def _keep(key: str, bpf, raw: set, reply: Reply, ids: list[int]) -> None:
    """What was loaded, into the compile cache: each function's instructions as the kernel was given them
    (bcc's module holds them) and its program type, each map's definition and fd here."""
    import ctypes as ct

    from bcc import libbcc  # declares the calls used here (bpf_function_start, bpf_table_flags_id, ...)

    from valkeytrace.tracers import bpf_cache

    lib, mod = libbcc.lib, bpf.module
    functions = []
    for name in reply.funcs:
        n = name.encode()
        kind = bpf_cache.PROG_TRACEPOINT if n.startswith(b"tracepoint__") else \
            bpf_cache.PROG_RAW_TRACEPOINT if n.startswith(b"raw_tracepoint__") or n in raw else bpf_cache.PROG_KPROBE
        functions.append(bpf_cache.CachedFunction(name, kind, ct.string_at(lib.bpf_function_start(mod, n),
                                                                           lib.bpf_function_size(mod, n))))
    maps = [bpf_cache.CachedMap(t.name, t.type, t.key_size, t.value_size, t.max_entries,
                                lib.bpf_table_flags_id(mod, i), lib.bpf_table_fd_id(mod, i))
            for t, i in zip(reply.tables, ids)]
    bpf_cache.store(key, bpf_cache.Entry(bpf_cache.FORMAT, lib.bpf_module_license(mod).decode(),
                                         lib.bpf_module_kern_version(mod), functions, maps, reply.autoload))


def main(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    try:
        reply, fds = _compile(msgspec.json.decode(sock.recv(MAX_MESSAGE), type=Request))
        if len(fds) > MAX_FDS:
            raise Exception(f"{len(fds)} programs and maps: more than one message carries")
        socket.send_fds(sock, [msgspec.json.encode(reply)], fds)
    except Exception as exc:  # bcc raises bare Exception; the parent says the first line
        text = str(exc).strip()
        sock.send(msgspec.json.encode(Reply(error=text.splitlines()[0] if text else type(exc).__name__)))
        return 1
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(int(sys.argv[1])))
