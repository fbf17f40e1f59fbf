"""Renderers of analysed recordings (analysis.report.ReportInput): text (rich), markdown, json, csv,
html, plots (matplotlib); and perfetto, which renders a recording's timelines (analysis/timeline.py).
They compute nothing a reader sees: analysis/ does."""
