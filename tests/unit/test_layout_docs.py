"""README's layout and docs/architecture.md name the house as it is: every package folder of
src/valkeytrace/ in both, every C source of csrc/ in README's layout and in architecture.md."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.name for p in (ROOT / "src" / "valkeytrace").iterdir() if p.is_dir() and p.name != "__pycache__")
C_FILES = sorted(p.name for p in (ROOT / "csrc").glob("*.c"))


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_every_package_is_named(doc):
    text = (ROOT / doc).read_text()
    missing = [p for p in PACKAGES if f"{p}/" not in text]
    assert not missing, f"{doc} does not name {missing}"


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_every_c_source_is_named(doc):
    text = (ROOT / doc).read_text()
    missing = [c for c in C_FILES if c not in text]
    assert not missing, f"{doc} does not name {missing}"
