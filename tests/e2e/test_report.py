"""`thresher report`: a real job's report against the night before, with actuals and bad
records, under 2 MB for 50 columns, drawn by a real browser (Debian's Chromium, driven by
Playwright) without a console error."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BIN = Path(sys.executable).parent
FEATURES = 48
ROWS = 20_000
MODEL = """
import numpy as np

class Scorer:
    def predict(self, batch):
        if (batch["f0"] > 3.0).any():
            raise ValueError("f0 out of range")
        score = 1 / (1 + np.exp(-batch["f1"]))
        return {"prediction": (score > 0.5).astype("int64"), "proba_1": score}
"""


def night(root: Path, shift: float) -> Path:
    """Job `nightly` over 48 numeric features and one category, f1 moved by `shift`."""
    rng = np.random.default_rng(int(shift * 10) + 3)
    data: dict[str, object] = {"id": np.arange(ROWS)}
    data |= {f"f{i}": rng.standard_normal(ROWS) + (shift if i == 1 else 0) for i in range(FEATURES)}
    data["region"] = rng.choice(["north", "south", "east"], ROWS, p=[0.5, 0.3, 0.2])
    pq.write_table(pa.table(data), root / f"in-{shift}.parquet", row_group_size=5_000)
    (root / "model.py").write_text(MODEL)
    spec = root / f"night-{shift}.toml"
    spec.write_text(
        f'[job]\nname = "nightly"\n[source]\nuri = "in-{shift}.parquet"\nid_column = "id"\n'
        '[model]\nkind = "python"\nuri = "model.py:Scorer"\nbatch_format = "numpy"\n'
        f'[sink]\nuri = "out-{shift}/"\n'
    )
    return spec


def thresher(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(BIN / "thresher"), *args], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def latest_job() -> str:
    listed = thresher("status", "--limit", "1").stdout
    return next(w for w in listed.split() if w.count("-") == 2 and w[:8].isdigit())


def test_a_report_is_one_small_file_a_browser_draws(tmp_path: Path) -> None:
    thresher("run", str(night(tmp_path, 0.0)))
    thresher("run", str(night(tmp_path, 1.0)))
    job = latest_job()
    labels = pq.read_table(sorted((tmp_path / "out-1.0").glob("part-*.parquet")))
    actual = pa.table({"id": labels.column("id"), "label": labels.column("prediction")})
    pq.write_table(actual.slice(0, 5_000), tmp_path / "labels.parquet")
    thresher("actuals", "add", job, str(tmp_path / "labels.parquet"), "--id-column", "id",
             "--label-column", "label")  # fmt: skip
    report = tmp_path / "report.html"
    thresher("report", job, "-o", str(report))

    page = report.read_text()
    assert report.stat().st_size <= 2 * 2**20, report.stat().st_size  # 2 MB for 50 columns
    assert "<script" not in page and not re.search(r"(src|href)=\"(https?:)?//", page)
    summary = page[page.index("<h2>Summary</h2>") : page.index("<h2>", page.index("Summary") + 9)]
    assert "drift" in summary and "<b>f1</b>" in summary  # the moved feature, named first
    for heading in ("Drift by column (PSI)", "Predictions", "Quality", "Model inputs",
                    "Bad records"):  # fmt: skip
        assert f"<h2>{heading}</h2>" in page, heading
    assert "f0 out of range" in page  # the error file's summary
    drawn = render_in_chromium(report, tmp_path / "report.png")
    assert drawn["errors"] == []
    assert drawn["svgs"] >= FEATURES + 3  # a chart per column, PSI, predictions
    assert drawn["height"] > 2_000


def render_in_chromium(page: Path, screenshot: Path) -> dict[str, object]:
    """Open the page in headless Chromium (offline); its console errors, charts and height."""
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("THRESHER_TEST_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        pytest.fail("no Chromium: `bash scripts/chromium.sh` installs Debian's")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
            tab = context.new_page()
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.on("requestfailed", lambda r: errors.append(f"fetched {r.url}"))
            tab.goto(page.as_uri())
            svgs = tab.evaluate("document.querySelectorAll('svg').length")
            height = tab.evaluate("document.body.scrollHeight")
            tab.screenshot(path=str(screenshot), full_page=False)
        finally:
            browser.close()
    return {"errors": errors, "svgs": svgs, "height": height}
