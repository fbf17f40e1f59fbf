"""The tracer's side of the compiling child (tracers/bcc_child.compile_program) against replies a child
should never send: one that does not decode, one whose fds were cut short by the kernel (more than the
receiver has room for: MSG_CTRUNC), one that lists more functions and maps than fds came with. Each is one
clear error, and every fd that arrived is closed (counted in /proc/self/fd). The child is a stand-in
(sys.executable pointed at a script that answers the request as told): the fault is the reply, the socket,
the fds and the kernel's truncation are real."""
import os
import sys

import msgspec
import pytest

from valkeytrace.tracers import bcc_child

CHILD = r'''
import json, os, socket, sys
sock = socket.socket(fileno=int(sys.argv[-1]))
sock.recv(1 << 20)
mode = os.environ["VT_FAKE_CHILD"]
fds = [os.open("/dev/null", os.O_RDONLY) for _ in range({"garbage": 5, "ctrunc": 252, "short": 2}[mode])]
if mode == "garbage":
    data = b"{not json"
else:
    n = len(fds) if mode == "ctrunc" else 3
    data = json.dumps({"funcs": [f"f{i}" for i in range(n)],
                       "tables": [{"name": "m", "key_size": 4, "value_size": 8, "max_entries": 1, "type": 2}]}).encode()
socket.send_fds(sock, [data], fds)
'''


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def child(tmp_path, monkeypatch):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(wrapper))
    return lambda mode: monkeypatch.setenv("VT_FAKE_CHILD", mode)


@pytest.mark.parametrize("mode, says", [
    ("garbage", "could not be read"),      # decoding fails: the 5 fds that came with it
    ("ctrunc", "cut short"),               # 252 fds sent, room for MAX_FDS (250): the kernel says MSG_CTRUNC
    ("short", "sent 2 fds for 3 functions and 1 maps"),  # fewer fds than the reply lists
])
def test_a_reply_that_cannot_be_used_is_one_error_and_leaks_no_fd(child, mode, says):
    child(mode)
    before = open_fds()
    with pytest.raises(Exception) as err:
        bcc_child.compile_program(b"int x;", [], cache=False)
    assert open_fds() == before, (mode, sorted(open_fds() - before, key=int)[:10])
    assert not isinstance(err.value, msgspec.DecodeError), err.value  # said, not a decoder's traceback
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
