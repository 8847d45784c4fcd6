"""mkdocs hooks (mkdocs.yml `hooks:`): the benchmark chart is served from where
benchmarks/run.py writes it, `benchmarks/results/chart.png`, so the site never shows a
stale copy of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).parents[1]
CHART = ROOT / "benchmarks" / "results" / "chart.png"


def on_files(files: Files, config: Any) -> Files:
    """Add the chart as `images/benchmark-chart.png` of the site."""
    files.append(File.generated(config, "images/benchmark-chart.png", abs_src_path=str(CHART)))
    return files
