"""Make the Iceberg example's lake: a SQLite catalog (`catalog.db`) and its warehouse
(`lake/`) beside this file, namespace `shop`, and the demo's customers as the table
`shop.customers`, written in two snapshots. Run `thresher demo` first (from the repo root),
then `python examples/iceberg/make_lake.py`, then `thresher run examples/iceberg/job.toml`.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from pyiceberg.catalog import load_catalog

HERE = Path(__file__).resolve().parent
DEMO = HERE.parent.parent / "thresher-demo" / "customers.parquet"


def main() -> None:
    # The same catalog job.toml names: `uri` and `warehouse` there are relative to its folder.
    catalog = load_catalog(
        "default", type="sql", uri=f"sqlite:///{HERE / 'catalog.db'}", warehouse=str(HERE / "lake")
    )
    catalog.create_namespace_if_not_exists("shop")
    if catalog.table_exists("shop.customers"):
        catalog.purge_table("shop.customers")
    customers = pq.read_table(DEMO)
    table = catalog.create_table("shop.customers", schema=customers.schema)
    half = customers.num_rows // 2
    table.append(customers.slice(0, half))  # two snapshots, to time travel between
    table.append(customers.slice(half))
    for snapshot in table.snapshots():
        rows = snapshot.summary["total-records"]
        print(f"shop.customers snapshot {snapshot.snapshot_id}: {rows} rows")


if __name__ == "__main__":
    main()
