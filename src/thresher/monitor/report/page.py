"""The report's one HTML page: summary first, then the charts and tables, with its style
inline and every chart an inline SVG — one file, no script, nothing fetched."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from thresher.monitor.report.errors import ErrorSummary

__all__ = ["ColumnView", "ReportPage", "render"]

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem;
       color: #1d2330; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; font-size: 1.15rem; }
.meta { color: #5b6475; } .grid { display: flex; flex-wrap: wrap; gap: 1rem; }
.card { border: 1px solid #dde1e8; border-radius: 6px; padding: .6rem .8rem; }
.verdict { display: inline-block; padding: .1rem .55rem; border-radius: 4px; font-weight: 600; }
.ok { background: #e3f4e8; color: #19692c; } .warn { background: #fff1d6; color: #8a5a00; }
.drift { background: #fde2e1; color: #a4161a; } .none { background: #eceef2; color: #5b6475; }
table { border-collapse: collapse; margin: .5rem 0; }
td, th { border-bottom: 1px solid #e6e9ef; padding: .25rem .6rem; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
svg { max-width: 100%; height: auto; }
"""


@dataclass(frozen=True)
class ColumnView:
    """One column's part of the report: its verdict and figures, and its chart."""

    name: str
    role: str
    kind: str
    verdict: str  # ok, warn, drift, or "none" without a baseline
    figures: dict[str, float | None]
    chart: str  # an <svg>


@dataclass
class ReportPage:
    title: str
    meta: list[str]
    verdict: str
    headline: list[tuple[str, str]]  # (label, value) cards at the top
    drifted: list[str] = field(default_factory=list)
    psi_chart: str | None = None
    columns: list[ColumnView] = field(default_factory=list)
    outputs: list[ColumnView] = field(default_factory=list)
    quality: list[tuple[str, str]] = field(default_factory=list)
    quality_chart: str | None = None
    errors: ErrorSummary | None = None


def render(page: ReportPage) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(page.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(page.title)}</h1>",
        *(f'<div class="meta">{e(line)}</div>' for line in page.meta),
        "<h2>Summary</h2>",
        f'<p>Verdict: <span class="verdict {e(page.verdict)}">{e(page.verdict)}</span>',
        f" {_drifted(page.drifted)}</p>" if page.verdict != "none" else "</p>",
        '<div class="grid">',
        *(
            f'<div class="card"><div class="meta">{e(k)}</div><b>{e(v)}</b></div>'
            for k, v in page.headline
        ),
        "</div>",
    ]
    if page.psi_chart:
        parts += ["<h2>Drift by column (PSI)</h2>", page.psi_chart]
    if page.outputs:
        parts += ["<h2>Predictions</h2>", _columns(page.outputs)]
    if page.quality:
        parts += ["<h2>Quality</h2>", _table(("metric", "value"), page.quality)]
    if page.quality_chart:
        parts.append(page.quality_chart)
    if page.columns:
        parts += ["<h2>Model inputs</h2>", _columns(page.columns)]
    parts += ["<h2>Bad records</h2>", _errors(page.errors), "</body></html>"]
    return "\n".join(parts)


def _drifted(names: list[str]) -> str:
    if not names:
        return "— no column drifted."
    return "— drifted: " + ", ".join(f"<b>{html.escape(n)}</b>" for n in names)


def _columns(columns: list[ColumnView]) -> str:
    blocks = []
    for c in columns:
        figures = ", ".join(f"{k} {_number(v)}" for k, v in c.figures.items() if v is not None)
        blocks.append(
            f'<div class="card"><b>{html.escape(c.name)}</b> <span class="meta">'
            f'{html.escape(c.kind)}</span> <span class="verdict {html.escape(c.verdict)}">'
            f'{html.escape(c.verdict)}</span><div class="meta">{html.escape(figures)}</div>'
            f"{c.chart}</div>"
        )
    return '<div class="grid">' + "".join(blocks) + "</div>"


def _table(headings: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "".join(
        "<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows
    )  # fmt: skip
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'<td class="n">{_number(value)}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def _errors(summary: ErrorSummary | None) -> str:
    if summary is None:
        return "<p class='meta'>The error file could not be read.</p>"
    if not summary.total:
        return "<p>None: every record was predicted.</p>"
    rows = []
    for kind in summary.kinds:
        first = kind.examples[0] if kind.examples else {}
        rows.append((kind.stage, kind.error, kind.count, first.get("where", ""),
                     first.get("message", "")))  # fmt: skip
    table = _table(("stage", "error", "records", "first at", "message"), rows)
    return f"<p>{summary.total:,} bad record(s).</p>{table}"


def _number(value: float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4g}"
