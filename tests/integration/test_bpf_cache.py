"""The compile cache (tracers/bpf_cache.py) against the kernel: a program compiled once is loaded from the
cache with fresh maps its instructions now point at (the witness: a counter map the kernel fills from a
tracepoint, by as many getppid(2) calls as made here), an entry that does not load is removed and the
program compiled again, and a cache someone else could write is never read."""
import os

import pytest

from valkeytrace.tracers import bcc_child, bpf_cache

pytestmark = pytest.mark.integration

PROGRAM = (b"BPF_ARRAY(counts, u64, 1);\n"
           b"BPF_HASH(seen, u32, u64, 64);\n"
           b"TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {\n"
           b"    u32 k = 0, tid = (u32)bpf_get_current_pid_tgid(); u64 one = 1;\n"
           b"    u64 *v = counts.lookup(&k); if (v) __sync_fetch_and_add(v, 1);\n"
           b"    seen.update(&tid, &one); return 0; }\n")
CALLS = 500


@pytest.fixture
def cache_dir(tmp_path, monkeypatch, needs_bpf):
    d = tmp_path / "cache"
    monkeypatch.setenv("VALKEYTRACE_BPF_CACHE", str(d))
    return d


def counted(bpf) -> int:
    before = bpf[b"counts"].value(0)
    for _ in range(CALLS):
        os.getppid()
    return bpf[b"counts"].value(0) - before


def test_compiled_once_then_loaded_from_the_cache_with_maps_of_its_own(cache_dir):
    first = bcc_child.compile_program(PROGRAM, [])
    try:
        assert first.program_from == "compiler" and len(list(cache_dir.glob("*.vtbpf"))) == 1
        second = bcc_child.compile_program(PROGRAM, [])
        try:
            assert second.program_from == "cache" and second.compile_peak_rss_mb is None
            assert set(second.funcs) == set(first.funcs) and set(second.tables) == set(first.tables)
            assert second.attached == first.attached  # its tracepoint attached as bcc attaches on load
            assert counted(second) >= CALLS
            # its own maps: the first program's counter moves too (both attached), but they are two maps
            second[b"counts"].put(0, 0)
            assert first[b"counts"].value(0) >= CALLS and second[b"counts"].value(0) == 0
            assert os.getpid() in second[b"seen"].keys()  # the hash, written by the kernel through its new fd
        finally:
            second.cleanup()
    finally:
        first.cleanup()


def test_an_entry_that_does_not_load_is_removed_and_compiled_again(cache_dir):
    bcc_child.compile_program(PROGRAM, []).cleanup()
    (entry,) = cache_dir.glob("*.vtbpf")
    entry.write_bytes(entry.read_bytes()[:-100])  # cut short
    again = bcc_child.compile_program(PROGRAM, [])
    try:
        assert again.program_from == "compiler" and counted(again) >= CALLS
        (kept,) = cache_dir.glob("*.vtbpf")
        assert bpf_cache.load(kept.stem) is not None  # stored again, whole
    finally:
        again.cleanup()


def test_a_cache_others_can_write_is_never_read(cache_dir):
    bcc_child.compile_program(PROGRAM, []).cleanup()
    (entry,) = cache_dir.glob("*.vtbpf")
    cache_dir.chmod(0o777)
    try:
        assert bpf_cache.load(entry.stem) is None
        p = bcc_child.compile_program(PROGRAM, [])
        p.cleanup()
        assert p.program_from == "compiler" and list(cache_dir.glob("*.vtbpf")) == [entry]  # nor written
    finally:
        cache_dir.chmod(0o700)
    entry.chmod(0o666)
    assert bpf_cache.load(entry.stem) is None


def test_off_compiles_every_time(monkeypatch, needs_bpf):
    monkeypatch.setenv("VALKEYTRACE_BPF_CACHE", "off")
    p = bcc_child.compile_program(PROGRAM, [])
    try:
        assert p.program_from == "compiler"
    finally:
        p.cleanup()


# Two real programs (r0 = 0; exit) loaded as raw tracepoints, bcc's autoload order: the first attaches to a
# real tracepoint, the second names one no kernel has, so the attach on load fails after the first took.
NOOP = bytes([0xb7, 0, 0, 0, 0, 0, 0, 0]) + bytes([0x95, 0, 0, 0, 0, 0, 0, 0])
AUTOLOAD = ["raw_tracepoint__sched_switch", "raw_tracepoint__vt_no_such_event"]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def prog_id(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return int(next(ln.split()[1] for ln in f if ln.startswith("prog_id:")))


def loaded_ids(ids, wait_s: float = 2.0) -> set[int]:
    """Which of these program ids the kernel still holds (a link's release is deferred: waited for)."""
    import shutil
    import subprocess
    import time

    from vtcli import must_have

    if shutil.which("bpftool") is None:
        must_have("bpftool (Debian's bpftool package): the kernel's own list of loaded programs")
    deadline = time.monotonic() + wait_s
    while True:
        left = {i for i in ids if subprocess.run(["bpftool", "prog", "show", "id", str(i)],
                                                 capture_output=True).returncode == 0}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def test_a_failed_attach_on_load_leaves_no_fd_and_nothing_attached(needs_bpf):
    from valkeytrace.tracers import bpf_fd

    so = bpf_fd.lib()
    before = open_fds()
    funcs = {}
    for name in AUTOLOAD:
        fd = so.bcc_prog_load(bpf_cache.PROG_RAW_TRACEPOINT, name.encode(), NOOP, len(NOOP), b"GPL", 0, 0, None, 0)
        assert fd >= 0, os.strerror(abs(fd))
        funcs[name.encode()] = fd
    map_fd = so.bcc_create_map(2, b"m", 4, 8, 1, 0)
    ids = {prog_id(fd) for fd in funcs.values()}
    with pytest.raises(Exception, match="vt_no_such_event"):
        bpf_fd.Program(funcs, [bpf_fd.Map("m", map_fd, 4, 8, 1, 2)], [n.encode() for n in AUTOLOAD])
    assert open_fds() == before, sorted(open_fds() - before, key=int)  # the programs', the map's, sched_switch's link
    assert not loaded_ids(ids)  # nothing attached holds them: the kernel unloaded both


def test_an_entry_whose_attach_fails_is_caught_removed_and_compiled_again(cache_dir):
    """bpf_cache.load's fallback catches the attach's error (it raised a bare Exception past it): the entry is
    removed, every fd it opened closed, nothing it attached stays, and the program is compiled instead."""
    k = bpf_cache.key(PROGRAM, [], ())
    bpf_cache.store(k, bpf_cache.Entry(bpf_cache.FORMAT, "GPL", 0, [
        bpf_cache.CachedFunction(n, bpf_cache.PROG_RAW_TRACEPOINT, NOOP) for n in AUTOLOAD], [], AUTOLOAD))
    (entry,) = cache_dir.glob("*.vtbpf")
    before = open_fds()
    assert bpf_cache.load(k) is None
    assert open_fds() == before, sorted(open_fds() - before, key=int)
    assert not entry.exists()
    bpf_cache.store(k, bpf_cache.Entry(bpf_cache.FORMAT, "GPL", 0, [
        bpf_cache.CachedFunction(n, bpf_cache.PROG_RAW_TRACEPOINT, NOOP) for n in AUTOLOAD], [], AUTOLOAD))
    p = bcc_child.compile_program(PROGRAM, [])
    try:
        assert p.program_from == "compiler" and counted(p) >= CALLS
    finally:
        p.cleanup()
    assert open_fds() == before, sorted(open_fds() - before, key=int)
