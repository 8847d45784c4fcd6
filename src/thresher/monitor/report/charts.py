"""The report's charts: matplotlib figures as inline SVG (text kept as text, so a chart is
a few kilobytes and reads in any browser, with no script and no network)."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["bars", "grouped_bars", "lines", "over_time", "svg_of"]

BASELINE, CURRENT, ACCENT = "#8c96a8", "#2f6fdf", "#d9822b"
_HEADER = re.compile(r"^.*?(<svg\b)", re.DOTALL)  # the XML declaration and DOCTYPE go
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.DOTALL)  # and the RDF credits


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "thresher report needs matplotlib: pip install 'thresher[monitor]'"
        ) from None
    matplotlib.use("Agg")
    # Labels are the data's own text (a column's values, its name): drawn as text, never
    # parsed as mathtext (`$x^$` would raise) or handed to TeX.
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "thresher"})
    matplotlib.rcParams.update({"text.parse_math": False, "text.usetex": False})
    import matplotlib.pyplot as plt

    return plt


def svg_of(figure: Any) -> str:
    """A figure as an `<svg>` element, and the figure closed."""
    plt = _pyplot()
    out = io.StringIO()
    figure.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    return _METADATA.sub("", _HEADER.sub(r"\1", out.getvalue(), count=1), count=1)


def grouped_bars(
    labels: Sequence[str],
    series: dict[str, Sequence[float]],
    title: str,
    ylabel: str = "share of rows",
) -> str:
    """Bars side by side per label: a baseline beside a current, say."""
    plt = _pyplot()
    width = max(3.0, min(5.6, 0.28 * len(labels) * max(1, len(series))))
    figure, axes = plt.subplots(figsize=(width, 2.2))
    step = 0.8 / max(1, len(series))
    colours = [BASELINE, CURRENT, ACCENT]
    for i, (name, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * step for x in range(len(labels))]
        axes.bar(xs, values, width=step, label=name, color=colours[i % len(colours)])
    axes.set_xticks(range(len(labels)), labels, rotation=40 if len(labels) > 4 else 0, ha="right")
    axes.tick_params(axis="x", labelsize=7)
    _finish(axes, title, ylabel, legend=len(series) > 1)
    return svg_of(figure)


def bars(
    labels: Sequence[str],
    values: Sequence[float],
    title: str,
    thresholds: Sequence[tuple[float, str]] = (),
    xlabel: str = "",
) -> str:
    """Horizontal bars, one per label (largest first as given), with threshold lines."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.0, max(1.2, 0.25 * len(labels) + 0.6)))
    axes.barh(range(len(labels)), values, color=CURRENT)
    axes.set_yticks(range(len(labels)), labels)
    axes.invert_yaxis()
    for at, name in thresholds:
        axes.axvline(at, color=ACCENT, linestyle="--", linewidth=1)
        axes.text(at, -0.6, f" {name} {at:g}", color=ACCENT, va="bottom", fontsize=8)
    _finish(axes, title, "", legend=False)
    axes.set_xlabel(xlabel)
    return svg_of(figure)


def lines(labels: Sequence[str], series: Mapping[str, Sequence[float | None]], title: str) -> str:
    """One line per series over `labels` (jobs, oldest first)."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.0, 2.4))
    for name, values in series.items():
        points = [(i, v) for i, v in enumerate(values) if v is not None]
        axes.plot([i for i, _ in points], [v for _, v in points], marker="o", label=name)
    axes.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    _finish(axes, title, "", legend=True)
    return svg_of(figure)


def over_time(seconds: Sequence[float], values: Sequence[float], title: str, ylabel: str) -> str:
    """A step line of `values` at `seconds` from a start (a job's rows done, say)."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.0, 2.4))
    axes.step(seconds, values, where="post", color=CURRENT)
    axes.set_xlabel("seconds since the job started")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    _finish(axes, title, ylabel, legend=False)
    return svg_of(figure)


def _finish(axes: Any, title: str, ylabel: str, legend: bool) -> None:
    axes.set_title(title, loc="left", fontsize=10)
    axes.set_ylabel(ylabel)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    if legend:  # above the plot, where it hides no bar
        axes.legend(frameon=False, fontsize=8, ncol=3, loc="lower right", bbox_to_anchor=(1, 1))
