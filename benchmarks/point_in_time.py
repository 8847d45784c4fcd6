"""The `features` source's point-in-time join against DuckDB's own ASOF JOIN.

    python benchmarks/point_in_time.py                          # 1M entities, 10M features
    python benchmarks/point_in_time.py --entities 200000 --features 2000000

Generates (seeded) an entity file (key, as-of time, one more column) and a feature table
(key, event time, two features; sorted by key, as a compacted table is), then runs, each in
a process of its own so that its peak RSS is its own (`os.wait4`):

- thresher: the `features` source planned and every shard read, one after another, in one
  process (what the workers of a job do between them), a ttl of 30 days; at the default
  `shard_bytes` unless `--shard-bytes` says otherwise;
- duckdb: one `ASOF LEFT JOIN` of the whole files, the same ttl, its result streamed as
  Arrow batches (DuckDB's ties are its own choice; thresher's are the last in file order).

Both read the files and hand over every joined row as Arrow. Prints a Markdown table and
writes it to benchmarks/results/point-in-time.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from thresher.spec import SourceSection

RESULTS = Path(__file__).parent / "results" / "point-in-time.md"
TTL = "30d"


def generate(directory: Path, entities: int, features: int, keys: int) -> None:
    import duckdb

    conn = duckdb.connect()
    conn.execute("SELECT setseed(0.42)")
    conn.execute(
        f"COPY (SELECT (random() * {keys})::BIGINT AS customer_id,"
        " TIMESTAMP '2024-01-01' + to_seconds((random() * 365 * 86400)::BIGINT) AS as_of,"
        f" i AS n FROM range({entities}) t(i))"
        f" TO '{directory}/entities.parquet' (ROW_GROUP_SIZE 131072)"
    )
    conn.execute(
        f"COPY (SELECT (random() * {keys})::BIGINT AS customer_id,"
        " TIMESTAMP '2023-12-01' + to_seconds((random() * 400 * 86400)::BIGINT) AS event_time,"
        " random() AS spend_30d, (random() * 100)::INTEGER AS txn_count_30d"
        f" FROM range({features}) ORDER BY customer_id, event_time)"
        f" TO '{directory}/features.parquet' (ROW_GROUP_SIZE 131072)"
    )


def run_thresher(directory: Path, shard_bytes: int) -> int:
    from thresher.sources import open_source
    from thresher.spec import SourceSection

    table = {
        "uri": f"{directory}/features.parquet",
        "key": "customer_id",
        "timestamp": "event_time",
        "ttl": TTL,
    }
    section = SourceSection.model_validate(
        {
            "uri": f"{directory}/entities.parquet",
            "format": "features",
            "id_column": "n",
            "shard_bytes": shard_bytes,
            "options": {"timestamp": "as_of", "tables": [table]},
        }
    )
    source = open_source(section)
    plan = source.plan()
    reader = source.reader(plan.schema, plan.schema.names)
    rows = 0
    for shard in plan.shards:
        for chunk in reader.read(shard, 65_536):
            rows += chunk.table.num_rows
    print(json.dumps({"shards": len(plan.shards)}), file=sys.stderr)
    return rows


def run_duckdb(directory: Path) -> int:
    import duckdb

    conn = duckdb.connect()
    sql = (
        "SELECT e.*, CASE WHEN f.event_time >= e.as_of - INTERVAL 30 DAY THEN f.spend_30d END,"
        " CASE WHEN f.event_time >= e.as_of - INTERVAL 30 DAY THEN f.txn_count_30d END"
        f" FROM read_parquet('{directory}/entities.parquet') e"
        f" ASOF LEFT JOIN read_parquet('{directory}/features.parquet') f"
        " ON e.customer_id = f.customer_id AND e.as_of >= f.event_time"
    )
    rows = 0
    for batch in conn.sql(sql).to_arrow_reader(65_536):
        rows += batch.num_rows
    return rows


def child(system: str, directory: Path, shard_bytes: int) -> None:
    # Each side's modules imported before the clock starts: a job's workers have theirs
    # imported before any shard, and thresher's (pydantic's models, the registry) took
    # a third of a second that is no part of the join.
    import duckdb  # noqa: F401

    if system == "thresher":
        import thresher.sources.features  # noqa: F401
    start = time.perf_counter()
    rows = run_thresher(directory, shard_bytes) if system == "thresher" else run_duckdb(directory)
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - start}))


def measure(system: str, directory: Path, shard_bytes: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", system, "--dir", str(directory)]
    command += ["--shard-bytes", str(shard_bytes)]
    out_path, err_path = directory / f"{system}.out", directory / f"{system}.err"
    with out_path.open("w") as out, err_path.open("w") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own peak RSS
    detail = err_path.read_text().strip()
    if status:
        raise SystemExit(f"{system} failed:\n{detail}")
    result: dict[str, Any] = json.loads(out_path.read_text().strip().splitlines()[-1])
    result["peak_mb"] = usage.ru_maxrss / 1024
    result["detail"] = detail
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    default_bytes = SourceSection.model_fields["shard_bytes"].default
    parser.add_argument("--shard-bytes", type=int, default=default_bytes)
    parser.add_argument("--child", choices=["thresher", "duckdb"])
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dir, args.shard_bytes)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        generate(directory, args.entities, args.features, args.keys)
        duck = measure("duckdb", directory, args.shard_bytes)
        ours = measure("thresher", directory, args.shard_bytes)
    assert ours["rows"] == duck["rows"] == args.entities, (ours, duck)
    report(args, ours, duck)


def report(args: argparse.Namespace, ours: dict[str, Any], duck: dict[str, Any]) -> None:
    shards = json.loads(ours["detail"].splitlines()[-1])["shards"] if ours["detail"] else "?"
    lines = [
        "# Point-in-time join: the `features` source vs DuckDB's ASOF JOIN",
        "",
        f"{args.entities:,} entities against {args.features:,} feature rows "
        f"({args.keys:,} keys, ttl {TTL}); thresher in {shards} shard(s) of "
        f"{args.shard_bytes:,} bytes, read one after another in one process; "
        f"{os.cpu_count()} cores. `python benchmarks/point_in_time.py "
        f"--entities {args.entities} --features {args.features}`.",
        "",
        "| system | seconds | peak RSS (MB) |",
        "| --- | ---: | ---: |",
        f"| duckdb ASOF JOIN, whole files | {duck['seconds']:.2f} | {duck['peak_mb']:.0f} |",
        f"| thresher features source | {ours['seconds']:.2f} | {ours['peak_mb']:.0f} |",
        f"| ratio thresher / duckdb | {ours['seconds'] / duck['seconds']:.2f}x"
        f" | {ours['peak_mb'] / duck['peak_mb']:.2f}x |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
