"""Formatting shared by the reporters. What they render is an analysis.report.ReportInput."""
from __future__ import annotations

from collections import Counter

from valkeytrace.analysis.report import AnalysedRun, ReportInput, share_tag
from valkeytrace.analysis.tables import MEASURED_OP

MINUS = "\u2212"  # the seed table writes negative deltas with a real minus sign


def fmt_pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    sign = "+" if value >= 0 else MINUS
    return f"{sign}{abs(value):.2f}%"


def fmt_us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def fmt_ktps(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000:.2f}"


def fmt_mbs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def server_note(run: AnalysedRun) -> str:
    s = run.server
    parts = [f"fsync={s.get('appendfsync') or '?'}"]
    if s.get("io_threads"):
        parts.append(f"io-threads={s['io_threads']}")
    if s.get("bio_aof_offload") is not None:
        parts.append(f"bio-aof-offload={'yes' if s['bio_aof_offload'] else 'no'}")
    return ", ".join(parts)


TITLES = {"read-heavy": "Read-heavy (GET + SET)", "write-only": "Write-only (SET)"}
COLUMNS = ("Value", "Op", "TPS (K req/s)", "MB/s", "P50 (µs)", "P95 (µs)", "P99 (µs)", "Notes")
DELTA_CONVENTION = ("Delta convention: {cand} vs {base}. TPS and MB/s: positive = higher throughput "
                    "(better). P50/P95/P99: negative = lower latency (better). MB/s = TPS × value size "
                    "(TPS × value bytes / 10^6). Each cell is the median of its repeats.")


def _row(label, size, op, o, note=""):
    return [label, f"{size} B", op, fmt_ktps(o.median["tps"]), fmt_mbs(o.median["mb_s"]), fmt_us(o.median["p50_us"]),
            fmt_us(o.median["p95_us"]), fmt_us(o.median["p99_us"]), note]


def _workload_note(run, workload, settings) -> str:
    s = settings or {}
    fsync = run.server.get("appendfsync") or "?"
    if workload == "read-heavy":
        return (f"GET c={s.get('get_clients', '?')} + c={s.get('set_clients', '?')} background SET; "
                f"fsync={fsync}")
    return f"isolated SET c={s.get('write_clients', '?')}; fsync={fsync}"



def client_tables(inp: ReportInput) -> list[dict]:
    """The #4029 tables: [{"title", "columns", "rows": [(cells, kind)]}], kind "" for one
    recording, else "baseline" / "candidate" / "delta" (the seed's columns and delta convention)."""
    out = []
    if inp.comparison is None:
        run = inp.baseline
        for workload in ("read-heavy", "write-only"):
            cells = [c for c in run.cells if c.workload == workload and MEASURED_OP[workload] in c.ops]
            if not cells:
                continue
            rows = []
            for i, c in enumerate(cells):
                o = c.ops[MEASURED_OP[workload]]
                note = _workload_note(run, workload, run.settings) if i == 0 else ""
                rows.append((_row(run.label, c.value_size, o.op, o, f"{note}{'; ' if note else ''}n={o.n}"), ""))
            out.append({"title": TITLES[workload], "columns": COLUMNS, "rows": rows})
        return out
    base, cand, cmp = inp.baseline, inp.candidate, inp.comparison
    for workload in ("read-heavy", "write-only"):
        rows = [r for r in cmp.rows if r.workload == workload and r.op == MEASURED_OP[workload]]
        if not rows:
            continue
        table = []
        for i, r in enumerate(rows):
            note = _workload_note(base, workload, base.settings) if i == 0 else ""
            table.append((_row(base.label, r.value_size, r.op, r.base, note), "baseline"))
            table.append((_row(cand.label, r.value_size, r.op, r.cand), "candidate"))
            noisy = [m.replace("_us", "").upper().replace("MB_S", "MB/s") for m, v in r.noise.items() if v]
            dnote = f"within noise: {', '.join(noisy)} (n={r.base.n}/{r.cand.n})" if noisy else ""
            table.append((["delta", f"{r.value_size} B", r.op, fmt_pct(r.deltas["tps"]), fmt_pct(r.deltas["mb_s"]),
                           fmt_pct(r.deltas["p50_us"]), fmt_pct(r.deltas["p95_us"]), fmt_pct(r.deltas["p99_us"]),
                           dnote], "delta"))
        out.append({"title": TITLES[workload], "columns": COLUMNS, "rows": table})
    return out


def explanation_entries(inp: ReportInput) -> tuple[list[dict], list[tuple[str, int]]]:
    """([{"title", "tag", "claim", "caveats"}], [(caveat, entries it applies to)]): a caveat that
    applies to more than one entry is said once, after them, not under each; the emulation
    sentence, which every report prints at the top, is not repeated as a caveat."""
    compared = inp.comparison is not None
    entries = (inp.explanation if compared else [e for r in inp.runs for e in (r.explanation or [])]) or []
    banners = [run.emulation for run in inp.runs if run.emulation]
    caveats = [[c for c in dict.fromkeys(e.get("caveats", [])) if not any(b in c for b in banners)] for e in entries]
    uses = Counter(c for cs in caveats for c in cs)
    out = [{"title": f"{e['workload']} {e['value_size']} B {e['op']} {e['metric'].replace('_us', '')}",
            "tag": share_tag(e, compared), "claim": e["claim"], "caveats": [c for c in cs if uses[c] == 1]} for e, cs in zip(entries, caveats)]
    return out, [(c, n) for c, n in uses.items() if n > 1]
