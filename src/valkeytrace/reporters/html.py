"""HTML: one self-contained page (inline SVG plots, no script, no external resource)."""
from __future__ import annotations

import html
import io

from valkeytrace.reporters import markdown
from valkeytrace.reporters.base import ReportInput

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}.emu{background:#fde2e2;border:1px solid #c44e52;padding:.6em;font-weight:bold}
.why li{margin:.5em 0}.caveat{color:#8a6d00}figure{margin:1.5em 0}svg{max-width:100%;height:auto}
"""


def _md_tables_to_html(md: str) -> str:
    """The markdown reporter's tables and bullets, as HTML (one renderer for the numbers)."""
    out, rows = [], []

    def flush():
        if rows:
            head, body = rows[0], [r for r in rows[2:]]
            out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>")
            for r in body:
                out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
            out.append("</table>")
            rows.clear()
    in_list = False
    for line in md.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        flush()
        if line.startswith("- ") or line.startswith("  - "):
            if not in_list:
                out.append('<ul class="why">')
                in_list = True
            text = html.escape(line.strip()[2:]).replace("**", "")
            cls = ' class="caveat"' if line.startswith("  - ") else ""
            out.append(f"<li{cls}>{text}</li>")
            continue
        if in_list:
            out.append("</ul>")
            in_list = False
        if line.startswith("# "):
            out.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("### "):
            out.append(f"<h3>{html.escape(line[4:])}</h3>")
        elif line.startswith("> "):
            out.append(f"<p class='emu'>{html.escape(line[2:]).replace('**', '')}</p>")
        elif line.startswith("**") and "emulated" in line:
            out.append(f"<p class='emu'>{html.escape(line).replace('**', '')}</p>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    flush()
    if in_list:
        out.append("</ul>")
    return "\n".join(out)


def render(inp: ReportInput, out) -> None:
    from valkeytrace.reporters import plots

    md = io.StringIO()
    markdown.render(inp, md)
    figures = []
    for name, fig in plots.make_all(inp).items():
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        plots.plt.close(fig)
        svg = buf.getvalue()
        svg = svg[svg.find("<svg"):]  # drop the XML prolog: inline in HTML
        figures.append(f'<figure id="{name}">{svg}<figcaption>{name.replace("_", " ")}</figcaption></figure>')
    out.write("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>valkeytrace report</title>"
              f"<style>{STYLE}</style></head><body>\n")
    out.write(_md_tables_to_html(md.getvalue()))
    out.write("\n<h2>Plots</h2>\n" + "\n".join(figures))
    out.write("\n</body></html>\n")
