"""A function's address in an ELF binary and where that address lies in the file: what a uprobe needs,
read from the ELF headers and symbol tables directly (the tracer process never loads bcc's symbol code,
which brings LLVM with it: docs/performance.md, the tracer's memory)."""
from __future__ import annotations

import functools
import struct

import numpy as np

PT_LOAD, PF_X = 1, 1
SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_FUNC, STT_GNU_IFUNC = 2, 10
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM_SIZE = 24  # Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64


def _header(data: bytes) -> tuple:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    return _EHDR.unpack_from(data)


def _sections(data: bytes) -> list[tuple]:
    h = _header(data)
    shoff, shentsize, shnum = h[6], h[11], h[12]
    return [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]


@functools.lru_cache(maxsize=256)  # a uprobe by symbol is attached and detached again (the binary read once)
def symbol_address(path: str, symbol: str) -> int | None:
    """The virtual address of the function `symbol` defined in path (its .symtab, else .dynsym), or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        sections = _sections(data)
    except (OSError, ValueError, struct.error):
        return None
    want = symbol.encode() + b"\0"
    for sh in sections:
        if sh[1] not in (SHT_SYMTAB, SHT_DYNSYM) or not sh[9]:
            continue
        strtab = sections[sh[6]]
        names = data[strtab[4]:strtab[4] + strtab[5]]
        offsets, at = [], names.find(want)
        while at >= 0:
            offsets.append(at)
            at = names.find(want, at + 1)
        if not offsets:
            continue
        n = sh[5] // _SYM_SIZE
        rows = np.frombuffer(data, dtype=np.uint8, count=n * _SYM_SIZE, offset=sh[4]).reshape(n, _SYM_SIZE)
        name, kind = rows[:, 0:4].copy().view("<u4")[:, 0], rows[:, 4] & 0xF
        shndx, value = rows[:, 6:8].copy().view("<u2")[:, 0], rows[:, 8:16].copy().view("<u8")[:, 0]
        hit = value[np.isin(name, offsets) & ((kind == STT_FUNC) | (kind == STT_GNU_IFUNC)) & (shndx != 0) & (value != 0)]
        if len(hit):
            return int(hit[0])
    return None


@functools.lru_cache(maxsize=1024)
def file_offset(path: str, vaddr: int) -> int:
    """Where the virtual address vaddr of an executable segment lies in the file (what a uprobe is
    attached at); ValueError when no such segment holds it."""
    with open(path, "rb") as f:
        head = f.read(64)
        h = _header(head)
        phoff, phentsize, phnum = h[5], h[9], h[10]
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _, _, p_memsz, _ = _PHDR.unpack_from(table, i * phentsize)
        if p_type == PT_LOAD and p_flags & PF_X and p_vaddr <= vaddr < p_vaddr + p_memsz:
            return vaddr - p_vaddr + p_offset
    raise ValueError(f"{vaddr:#x} is in no executable segment of {path}")
