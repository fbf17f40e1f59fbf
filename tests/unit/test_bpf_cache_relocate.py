"""tracers/bpf_cache.relocate: a cached program's map references moved to the maps made for it (pure)."""
import struct

import pytest

from valkeytrace.tracers.bpf_cache import LD_IMM64, relocate


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def ld_map(fd: int, src: int = 1) -> bytes:
    return insn(LD_IMM64, dst=1, src=src, imm=fd) + insn(0, imm=0)


def test_each_map_reference_moves_to_its_new_fd_and_nothing_else_changes():
    mov_r0_7 = insn(0xb7, imm=7)   # an immediate that happens to equal an old fd: not a map reference
    exit_ = insn(0x95)
    prog = mov_r0_7 + ld_map(7) + ld_map(9, src=2) + insn(LD_IMM64, imm=7) + insn(0, imm=0) + exit_
    out = relocate(prog, {7: 31, 9: 40})
    assert len(out) == len(prog)
    words = [struct.unpack("<BBhi", out[i:i + 8]) for i in range(0, len(out), 8)]
    assert words[0][3] == 7                    # the mov keeps its immediate
    assert words[1][3] == 31 and words[2][3] == 0  # BPF_PSEUDO_MAP_FD: moved; its second slot untouched
    assert words[3][3] == 40                   # BPF_PSEUDO_MAP_VALUE: moved
    assert words[5][3] == 7                    # a plain 64-bit immediate is no map
    assert out[-8:] == exit_


def test_a_reference_it_cannot_move_refuses_the_entry():
    with pytest.raises(ValueError):
        relocate(ld_map(5), {7: 31})           # a map the entry does not define
    with pytest.raises(ValueError):
        relocate(ld_map(7, src=4), {7: 31})    # a BTF or function reference: compiled instead
