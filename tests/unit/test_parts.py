"""The Parquet part writer: dictionaries only where values repeat."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from thresher.sinks.parts import ParquetPartWriter


def test_floats_and_ids_are_written_plain_and_labels_with_a_dictionary() -> None:
    """A dictionary never pays for floats, nor for values nearly all distinct (the id
    column, a kept free-text column): building one took three times the rest of a write."""
    rows = 10_000
    table = pa.table(
        {
            "id": np.arange(rows),
            "label": pa.array(["cat", "dog"] * (rows // 2)),
            "segment": pa.array(np.arange(rows) % 7),
            "note": pa.array([f"note {i}" for i in range(rows)]),
            "proba_cat": np.random.default_rng(0).random(rows),
            "embedding": pa.FixedSizeListArray.from_arrays(
                pa.array(np.random.default_rng(1).random(rows * 4).astype(np.float32)), 4
            ),
        }
    )
    buffer = io.BytesIO()
    writer = ParquetPartWriter(buffer, table.schema)
    writer.write_table(table)
    writer.close()
    written = pq.ParquetFile(io.BytesIO(buffer.getvalue()))
    group = written.metadata.row_group(0)
    encodings = {
        group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)
    }
    assert "RLE_DICTIONARY" in encodings["label"]
    assert "RLE_DICTIONARY" in encodings["segment"]
    assert "RLE_DICTIONARY" not in encodings["id"]
    assert "RLE_DICTIONARY" not in encodings["note"]
    assert "RLE_DICTIONARY" not in encodings["proba_cat"]
    assert "RLE_DICTIONARY" not in encodings["embedding.list.element"]
    assert written.read().equals(table)
