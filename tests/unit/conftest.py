"""Shared by the unit tests: a capability `make setup` installs is a failure when missing in CI as
root (a skip there would let CI pass green without the test)."""
import os
import shutil

import pytest


def need_tool(name: str) -> None:
    if shutil.which(name) is not None:
        return
    reason = f"{name} not installed (make setup installs it)"
    if os.environ.get("CI") and os.geteuid() == 0:
        pytest.fail(f"{reason}: CI runs as root after make setup")
    pytest.skip(reason)


@pytest.fixture
def objdump():
    need_tool("objdump")


@pytest.fixture
def gcc():
    need_tool("gcc")
