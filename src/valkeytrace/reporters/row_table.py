"""A table of one row per side (report --overload, report --durability): its heading, its cells and the note
under it, in text, markdown, JSON or HTML. Each report gives its columns, its title and its cells."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class RowTable:
    name: str                    # the JSON's format: valkeytrace-<name>
    head: tuple[str, ...]
    note: str
    cells: Callable[[Any], list[str]]
    title: Callable[[list], str]
    width: int = 160             # the text table's width

    def text(self, rows: list, out) -> None:
        from rich.console import Console
        from rich.table import Table

        console = Console(file=out, width=self.width, force_terminal=False, soft_wrap=False, color_system=None)
        t = Table(title=self.title(rows), show_edge=False, pad_edge=False)
        for h in self.head:
            t.add_column(h, justify="left" if h == self.head[0] else "right", overflow="fold")  # the row's name
        for r in rows:
            t.add_row(*self.cells(r))
        console.print(t)
        console.print(self.note)

    def markdown(self, rows: list, out) -> None:
        out.write(f"### {self.title(rows)}\n\n| " + " | ".join(self.head) + " |\n|" + "---|" * len(self.head) + "\n")
        for r in rows:
            out.write("| " + " | ".join(self.cells(r)) + " |\n")
        out.write(f"\n{self.note}\n")

    def html(self, rows: list, out) -> None:
        e, title = html.escape, self.title(rows)
        out.write(f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{e(title)}</title>"
                  "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
                  "td:first-child,th:first-child{text-align:left}</style></head><body>\n"
                  f"<h2>{e(title)}</h2>\n<table>\n<tr>" + "".join(f"<th>{e(h)}</th>" for h in self.head) + "</tr>\n")
        for r in rows:
            out.write("<tr>" + "".join(f"<td>{e(c)}</td>" for c in self.cells(r)) + "</tr>\n")
        out.write(f"</table>\n<p>{e(self.note)}</p>\n</body></html>\n")

    def json(self, rows: list, out) -> None:
        json.dump({"format": f"valkeytrace-{self.name}", "version": 1, "rows": [r.to_json() for r in rows]}, out,
                  indent=2)
        out.write("\n")

    def renderers(self, *formats: str) -> dict[str, Callable]:
        return {f: getattr(self, f) for f in formats}
