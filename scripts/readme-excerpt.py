#!/usr/bin/env python3
"""Refresh README.md's demo excerpt from the recordings `make demo` wrote (demo/*.vtrace).

Usage: .venv/bin/python scripts/readme-excerpt.py [DEMO_DIR]   (or: make readme-excerpt)

Renders `report --compare` of the demo's baseline and virtual offload as markdown, keeps the
verdict and the why (as the report opens), both #4029 tables, the what-if check and the
intervention slopes, then the write-only table of the baseline against everysec (the early-ack
reference), and
replaces the text between the README's `<!-- demo-excerpt -->` markers. Nothing is typed by hand:
what the README shows is what the last demo printed.
"""
import io
import re
import sys
from pathlib import Path

from valkeytrace.recording import format as recfmt
from valkeytrace.reporters import markdown
from valkeytrace.analysis.report import analyse

START, END = "<!-- demo-excerpt:start -->", "<!-- demo-excerpt:end -->"


def _markdown(paths) -> list[str]:
    buf = io.StringIO()
    markdown.render(analyse([(str(p), recfmt.read(p)) for p in paths]), buf)
    return buf.getvalue().splitlines()


def _tables(lines: list[str], titles=("Read-heavy", "Write-only")) -> list[str]:
    out = []
    for title in titles:
        head = [x for x in lines if x.startswith(f"| {title}")][:1]
        if not head:
            continue
        i = lines.index(head[0])
        block = [head[0]]
        for x in lines[i + 1:]:
            if not x.startswith("|"):
                break
            block.append(x)
        out += block + [""]
    return out


def excerpt(demo: Path) -> str:
    lines = _markdown([demo / "cmp" / "baseline.vtrace", demo / "cmp" / "candidate.vtrace"])
    out, keep = [], False
    for line in lines:  # the verdict and the why, as the report opens
        if line.startswith("## "):
            keep = line in ("## Verdict", "## Why")
            if keep:
                out.append(f"**{line[3:]}**")
            continue
        if keep and line.startswith("|"):  # the tables follow the why: taken whole below
            keep = False
        if keep and (line.strip() or (out and out[-1].strip())):
            out.append(line)
    sections, keep = [], False
    for line in lines:
        if line.startswith("### "):
            keep = line.startswith("### What-if check") or line.startswith("### Intervention")
            if keep:
                sections.append(f"\n**{line[4:]}** (from the report's appendix)\n")
            continue
        if keep and line.startswith(("- read-heavy", "- write-only")) and (" p50" in line or " TPS" in line):
            sections.append(line)
    body = "\n".join(out).strip() + "\n\n" + "\n".join(_tables(lines)) + "\n".join(sections)
    if not (demo / "everysec.vtrace").exists():  # make demo without DETAIL=1
        return body
    ref = _tables(_markdown([demo / "cmp" / "baseline.vtrace", demo / "everysec.vtrace"]), ("Write-only",))
    return (body + "\n\n**The early-ack reference: fsync-always vs fsync-everysec (SETs acknowledged before their "
            "fsync)**\n\n" + "\n".join(ref).strip())


def main():
    demo = Path(sys.argv[1] if len(sys.argv) > 1 else "demo")
    readme = Path(__file__).resolve().parent.parent / "README.md"
    text = readme.read_text()
    if START not in text or END not in text:
        sys.exit(f"README.md has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{excerpt(demo)}\n{END}{tail}")
    print(f"README.md: excerpt refreshed from {demo}")


if __name__ == "__main__":
    main()
