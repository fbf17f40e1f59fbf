"""report --durability REC...: what a power cut loses, one row per side (analysis/powercut.py), as text,
markdown, JSON or HTML."""
from __future__ import annotations

import html
import json

from valkeytrace.analysis.powercut import DurabilityRow
from valkeytrace.reporters.memory_words import fmt_ms

HEAD = ("side", "SET/s offered", "acked writes (keys)", "acked lost at a power cut", "oldest lost write's age",
        "p50 / p99")
NOTE = ("acked writes: SETs the clients saw acknowledged before the cut (keys: each key's latest, the ones checked); "
        "acked lost: of those keys, the ones whose value (or a later one) the worst power-cut state lacks "
        "(record --verify-durability power-cut: each file cut to what its completed fsyncs had made durable; "
        "a kill's count where the row says kill); oldest lost write's age: how long before the cut the oldest "
        "lost acknowledged SET was sent; p50 / p99: the clients' latency (from each SET's due moment).")


def _n(v: float | int | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def cells(r: DurabilityRow) -> list[str]:
    lost = "–" if r.acked_lost is None else f"{r.acked_lost:,} of {r.acked or 0:,}" + (
        f" (worst of {r.states} states)" if r.states and r.states > 1 else "") + (
        " (a kill)" if r.method == "kill" else "")
    return [r.side + (f" ({r.label})" if r.label and r.label not in r.side else "")
            + (f", the disk stalling {r.stall}" if r.stall else ""),
            _n(r.offered), f"{_n(r.writes_acked)} ({_n(r.acked)})", lost,
            "–" if r.lost_window_ms is None or not r.acked_lost else fmt_ms(r.lost_window_ms * 1000),
            f"{fmt_ms(r.p50_us)} / {fmt_ms(r.p99_us)}"]


def _title(rows: list[DurabilityRow]) -> str:
    sizes = sorted({r.value_size for r in rows})
    return f"Durability at a power cut: open-loop SETs of {', '.join(f'{s} B' for s in sizes)}"


def render_text(rows: list[DurabilityRow], out) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=160, force_terminal=False, soft_wrap=False, color_system=None)
    t = Table(title=_title(rows), show_edge=False, pad_edge=False)
    for h in HEAD:
        t.add_column(h, justify="left" if h == "side" else "right", overflow="fold")
    for r in rows:
        t.add_row(*cells(r))
    console.print(t)
    console.print(NOTE)


def render_markdown(rows: list[DurabilityRow], out) -> None:
    out.write(f"### {_title(rows)}\n\n| " + " | ".join(HEAD) + " |\n|" + "---|" * len(HEAD) + "\n")
    for r in rows:
        out.write("| " + " | ".join(cells(r)) + " |\n")
    out.write(f"\n{NOTE}\n")


def render_html(rows: list[DurabilityRow], out) -> None:
    e = html.escape
    out.write(f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{e(_title(rows))}</title>"
              "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
              "td:first-child,th:first-child{text-align:left}</style></head><body>\n"
              f"<h2>{e(_title(rows))}</h2>\n<table>\n<tr>" + "".join(f"<th>{e(h)}</th>" for h in HEAD) + "</tr>\n")
    for r in rows:
        out.write("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells(r)) + "</tr>\n")
    out.write(f"</table>\n<p>{e(NOTE)}</p>\n</body></html>\n")


def render_json(rows: list[DurabilityRow], out) -> None:
    json.dump({"format": "valkeytrace-durability", "version": 1, "rows": [r.to_json() for r in rows]}, out, indent=2)
    out.write("\n")


RENDER = {"text": render_text, "markdown": render_markdown, "json": render_json, "html": render_html}
