#!/usr/bin/env python3
"""Refresh README.md's demo excerpt from the recordings `make demo` wrote (demo/*.vtrace).

Usage: .venv/bin/python scripts/readme-excerpt.py [DEMO_DIR]   (or: make readme-excerpt)

Renders `report --compare` of the demo's two recordings as markdown, keeps the verdict and the
why (as the report opens), the read-heavy table, the what-if check and the intervention slopes, and
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


def excerpt(demo: Path) -> str:
    paths = [demo / "cmp" / "baseline.vtrace", demo / "cmp" / "candidate.vtrace"]
    buf = io.StringIO()
    markdown.render(analyse([(str(p), recfmt.read(p)) for p in paths]), buf)
    lines = buf.getvalue().splitlines()
    out, keep = [], False
    for line in lines:  # the verdict and the why, as the report opens
        if line.startswith("## "):
            keep = line in ("## Verdict", "## Why")
            if keep:
                out.append(f"**{line[3:]}**\n")
            continue
        if keep:
            out.append(line)
    table = [line for line in lines if line.startswith("| Read-heavy") or line.startswith("|---")][:2]
    table += [line for line in lines if re.match(r"\| (fsync-always|fsync-everysec|delta) \| \d+ B \| GET", line)]
    sections, keep = [], False
    for line in lines:
        if line.startswith("### "):
            keep = line.startswith("### What-if check") or line.startswith("### Intervention")
            if keep:
                sections.append(f"\n**{line[4:]}** (from the report's appendix)\n")
            continue
        if keep and line.startswith("- read-heavy"):
            sections.append(line)
    return "\n".join([x for x in out if x.strip() or True]).strip() + "\n\n" + "\n".join(table + sections)


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
