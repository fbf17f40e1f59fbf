"""tracers/elf.py: a function's address and its file offset (where a uprobe goes), read from the ELF
headers directly, against binutils' own reading of the same binaries (nm, objdump -F)."""
import re
import subprocess

import pytest

from valkeytrace.server.binaries import embedded_server
from valkeytrace.tracers import elf
from valkeytrace.tracers.emulation import shim_library


def _nm(path: str, dynamic: bool = False) -> dict[str, int]:
    out = subprocess.run(["nm", "--defined-only"] + (["-D"] if dynamic else []) + [path], capture_output=True,
                         text=True, check=True).stdout
    return {m.group(3): int(m.group(1), 16) for m in re.finditer(r"^([0-9a-f]+) ([TtWi]) (\S+)$", out, re.M)}


def _objdump_offset(path: str, vaddr: int) -> int:
    out = subprocess.run(["objdump", "-d", "-F", f"--start-address={vaddr:#x}", f"--stop-address={vaddr + 4:#x}", path],
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r"File Offset: (0x[0-9a-f]+)", out).group(1), 16)


@pytest.mark.parametrize("binary,names,dynamic", [
    (embedded_server, ("beforeSleep", "flushAppendOnlyFile", "aeMain"), False),  # the server's .symtab
    (shim_library, ("fdatasync", "fsync"), True),                                 # a shared object's .dynsym
])
def test_addresses_and_offsets_agree_with_binutils(binary, names, dynamic):
    path = str(binary())
    table = _nm(path, dynamic)
    for name in names:
        addr = elf.symbol_address(path, name)
        assert addr == table[name], name
        assert elf.file_offset(path, addr) == _objdump_offset(path, addr), name
    assert elf.symbol_address(path, "no_such_function_here") is None
    with pytest.raises(ValueError):
        elf.file_offset(path, 0x10)  # below every executable segment


def test_what_is_not_an_elf_file_has_no_symbols(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"#!/bin/sh\necho hi\n")
    assert elf.symbol_address(str(p), "main") is None
    assert elf.symbol_address(str(tmp_path / "missing"), "main") is None
