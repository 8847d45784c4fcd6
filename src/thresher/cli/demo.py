"""`thresher demo`: the whole path on a synthetic credit-scoring table, offline.

It generates customers, trains a small gradient-boosting model on a sample, saves it in the
safe skops format, writes a job spec beside them, runs it, and shows a few results.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from thresher.cli.options import EXIT_FAILED, fail, with_store
from thresher.errors import ModelLoadError, ThresherError

if TYPE_CHECKING:  # numpy and pyarrow are imported when the demo runs, not with the CLI
    import pyarrow as pa

    from thresher.store import Store

__all__ = ["demo", "make_customers", "run_demo", "train_model"]

FEATURES = [
    "age",
    "income",
    "debt_ratio",
    "credit_lines",
    "late_payments_30d",
    "late_payments_90d",
    "utilization",
    "months_employed",
    "dependents",
    "home_owner",
]

# What a fitted HistGradientBoostingClassifier holds beyond skops' default trust list.
TRUSTED_TYPES = ["sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor"]

SPEC = """\
# A job spec written by `thresher demo`. Run it again with: thresher run {spec}
[job]
name = "demo-credit-scoring"

[source]
uri = "customers.parquet"
id_column = "customer_id"
columns = [{columns}]
shard_bytes = 16_000_000

[model]
kind = "sklearn"
uri = "model.skops"
outputs = ["prediction", "proba"]
# skops loads only types it trusts; these were reviewed (the demo made the file).
trusted_types = [{trusted}]

[batch]
size = 65536

[sink]
uri = "scores/"
format = "parquet"
keep_columns = ["segment"]
"""


@click.command()
@click.option("--rows", default=1_000_000, show_default=True, help="Customers to generate.")
@click.option(
    "--dir",
    "directory",
    default="thresher-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the data, model, spec and results go.",
)
@with_store
def demo(store_url: str | None, rows: int, directory: Path) -> None:
    """Score a synthetic credit table end to end, offline: data, model, spec, results."""
    from thresher.store import open_store

    try:
        ok = run_demo(directory, rows, open_store(store_url))
    except ThresherError as exc:
        fail(f"demo failed: {exc}", EXIT_FAILED)
    if not ok:
        sys.exit(EXIT_FAILED)


def make_customers(rows: int, seed: int = 7) -> pa.Table:
    """A credit table with a default probability that depends on the features."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, rows)
    income = np.round(rng.lognormal(10.5, 0.6, rows), 2)
    debt_ratio = np.clip(rng.beta(2, 5, rows) * 1.5, 0, None)
    credit_lines = rng.poisson(6, rows)
    late30 = rng.poisson(0.4, rows)
    late90 = rng.poisson(0.1, rows)
    utilization = rng.beta(2, 3, rows)
    months_employed = rng.integers(0, 480, rows)
    dependents = rng.poisson(1.0, rows)
    home_owner = rng.integers(0, 2, rows)
    score = (
        -3.0
        + 1.8 * debt_ratio
        + 0.9 * late30
        + 1.6 * late90
        + 2.0 * utilization
        - 0.015 * (age - 18)
        - 0.25 * np.log(income / 36_000)
        - 0.002 * months_employed
    )
    default = rng.random(rows) < 1 / (1 + np.exp(-score))
    columns = [
        age,
        income,
        debt_ratio,
        credit_lines,
        late30,
        late90,
        utilization,
        months_employed,
        dependents,
        home_owner,
    ]
    data = {"customer_id": np.arange(1, rows + 1, dtype=np.int64)}
    data |= {name: col.astype(np.float64) for name, col in zip(FEATURES, columns, strict=True)}
    data["segment"] = np.array(["retail", "premium", "small-business"])[rng.integers(0, 3, rows)]
    data["defaulted"] = default
    return pa.table(data)


def train_model(table: pa.Table, path: Path, sample: int = 50_000) -> None:
    """Fit a gradient-boosting classifier on a sample and save it with skops."""
    import numpy as np

    try:
        import skops.io as sio
        from sklearn.ensemble import HistGradientBoostingClassifier
    except ImportError as exc:
        raise ModelLoadError(
            "the demo needs scikit-learn: pip install 'thresher[sklearn]'"
        ) from exc
    part = table.slice(0, min(sample, table.num_rows))
    x = np.column_stack([part.column(f).to_numpy() for f in FEATURES])
    y = part.column("defaulted").to_numpy(zero_copy_only=False).astype(np.int64)
    model = HistGradientBoostingClassifier(max_iter=60, max_depth=5, random_state=0).fit(x, y)
    sio.dump(model, path)


def run_demo(directory: Path, rows: int, store: Store | None = None) -> bool:
    """Generate, train, write the spec, run it, and print where the results are."""
    import pyarrow.parquet as pq

    from thresher.cli.views.summary import print_result
    from thresher.coordinator.job import run_job
    from thresher.coordinator.progress import reporter_for
    from thresher.spec import load_spec

    directory.mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()
    table = make_customers(rows)
    pq.write_table(table, directory / "customers.parquet", row_group_size=131_072)
    train_model(table, directory / "model.skops")
    spec_path = directory / "score.toml"
    columns = ", ".join(f'"{f}"' for f in FEATURES)
    trusted = ", ".join(f'"{t}"' for t in TRUSTED_TYPES)
    spec_path.write_text(
        SPEC.format(spec=spec_path, columns=columns, trusted=trusted), encoding="utf-8"
    )
    click.echo(
        f"demo: {rows:,} customers and a model in {time.perf_counter() - clock:.1f}s "
        f"({directory}/customers.parquet, model.skops, score.toml)"
    )
    result = run_job(load_spec(spec_path), store, reporter_for())
    print_result(result)
    if result.succeeded:
        _show_sample(directory / "scores")
    return result.succeeded


def _show_sample(scores: Path) -> None:
    import pyarrow.parquet as pq

    first = sorted(scores.glob("part-*.parquet"))[0]
    head = pq.read_table(first).slice(0, 5).to_pylist()
    click.echo(f"first rows of {first}:")
    for row in head:
        click.echo("  " + ", ".join(f"{k}={_fmt(v)}" for k, v in row.items()))


def _fmt(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
