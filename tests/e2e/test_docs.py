"""The docs site, checked as CI checks it: `mkdocs build --strict` passes, and every code
block of every page (and of the README) runs, in page order, in a folder of its own that
holds small data — so the docs cannot rot.

How each block is run, by its info string:

- `python`: executed, the page's blocks in one namespace (a later block uses an earlier
  one's names), which starts with `thresher`, `np`, `pd`, and `df` / `model`: a small
  DataFrame and a scikit-learn model trained on it.
- `bash`: run by `bash -euo pipefail` with the installed `thresher` on PATH and a store
  of the page's own (`THRESHER_STORE`).
- `toml`, `yaml`, `json` with a `title="name"`: written to that file for later blocks
  (a spec, a config); without one, parsed, so a fragment at least is valid.
- no info string, `text` or `console`: a listing of output or a transcript, not run;
  any other language fails the test, so no block is skipped by a name it does not know.

A block that cannot run here (S3, GPUs, a cluster, a server of its own) carries the
comment `<!-- no-run: why -->` on the line before it; `test_few_blocks_are_not_run`
counts them and wants each to say why.

Why a collector of our own rather than mktestdocs or pytest-markdown-docs: both run only
Python blocks, each in a namespace or a process of its own making (pytest-markdown-docs
also needs `--markdown-docs` on every pytest command line, scripts/test.sh's included);
the pages here are mostly TOML specs and `thresher` commands, which must run beside the
Python in one prepared folder, and a skipped block must say why. This file is that
runner in one place, on the standard library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
NO_RUN = re.compile(r"<!-- no-run: (?P<why>[^>]+?) -->\s*$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
# Blocks that cannot run on a CI machine: each says why on the page; this is the ceiling.
MOST_NOT_RUN = 20
ROWS = 1000
LISTINGS = ("", "text", "console")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    title: str | None
    code: str
    no_run: str | None

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page, in order, with what the info string and the line
    before each say."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skipped = NO_RUN.search(before)
        info = match.group("info").strip()
        title = TITLE.search(info)
        code = match.group("code")
        indent = len(match.group("indent"))
        code = "\n".join(line[indent:] for line in code.split("\n"))
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                lang=info.split(" ", 1)[0],
                title=title.group("title") if title else None,
                code=code,
                no_run=skipped.group("why") if skipped else None,
            )
        )
    return found


def small_model() -> tuple[pd.DataFrame, Any]:
    """1,000 rows of three features and a scikit-learn model trained on them."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(7)
    frame = pd.DataFrame(rng.normal(size=(ROWS, 3)), columns=["f0", "f1", "f2"])
    return frame, LogisticRegression().fit(frame, (frame["f0"] + frame["f1"] > 0).astype(int))


def make_site(folder: Path) -> None:
    """Small data every page may use: `data/customers.parquet` (customer_id, f0-f2,
    segment) and `model.skops`, a classifier trained on it."""
    from skops.io import dump

    frame, model = small_model()
    labels = model.predict(frame)
    table = pa.table(
        {
            "customer_id": np.arange(1, ROWS + 1),
            **{name: frame[name].to_numpy() for name in frame},
            "segment": np.where(labels == 1, "retail", "small-business"),
        }
    )
    (folder / "data").mkdir()
    pq.write_table(table, folder / "data" / "customers.parquet")
    dump(model, folder / "model.skops")


@pytest.fixture(scope="module")
def site_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    make_site(folder)
    return folder


def run_bash(block: Block, folder: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "THRESHER_STORE": f"sqlite:///{folder / 'store.db'}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"{block.where()}: exit {done.returncode}\n{done.stderr[-3000:]}"


def run_block(block: Block, folder: Path, namespace: dict[str, Any]) -> None:
    """Run one block as its info string says (see the module's docstring)."""
    if block.title:
        target = folder / block.title
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.code, encoding="utf-8")
    if block.lang == "python":
        exec(compile(block.code, block.where(), "exec"), namespace)
    elif block.lang == "bash":
        run_bash(block, folder)
    elif block.lang == "toml":
        tomllib.loads(block.code)
    elif block.lang == "yaml":
        yaml.safe_load(block.code)
    elif block.lang == "json":
        json.loads(block.code)
    else:
        assert block.lang in LISTINGS, f"{block.where()}: no runner for ```{block.lang}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [p for p in [*PAGES, ROOT / "README.md"] if any(not b.no_run for b in blocks(p))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_code_block_runs(
    page: Path, site_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "site"
    shutil.copytree(site_template, folder)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("THRESHER_STORE", f"sqlite:///{folder / 'store.db'}")
    namespace = make_namespace()
    for block in blocks(page):
        if block.no_run is None:
            run_block(block, folder, namespace)


def make_namespace() -> dict[str, Any]:
    """The names a page's Python starts with, fresh for each page."""
    import thresher

    frame, model = small_model()
    return {
        "__name__": "__docs__",
        "thresher": thresher,
        "np": np,
        "pd": pd,
        "df": frame,
        "model": model,
    }


def test_few_blocks_are_not_run() -> None:
    every = [b for p in [*PAGES, ROOT / "README.md"] for b in blocks(p)]
    skipped = [b for b in every if b.no_run is not None]
    assert all(len(b.no_run or "") >= 10 for b in skipped), "each no-run says why"
    listing = "\n".join(f"{b.where()}: {b.no_run}" for b in skipped)
    assert len(skipped) <= MOST_NOT_RUN, f"{len(skipped)} blocks not run:\n{listing}"
    assert len(skipped) * 4 <= len(every), listing


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert "WARNING" not in done.stderr, done.stderr[-5000:]
    assert (tmp_path / "site" / "images" / "benchmark-chart.png").read_bytes() == (
        ROOT / "benchmarks" / "results" / "chart.png"
    ).read_bytes()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "thresher.predict" in api and "check_sink" in api
