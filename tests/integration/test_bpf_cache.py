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
