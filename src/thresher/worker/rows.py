"""A chunk's rows with what it takes to report any of them as a bad record."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from thresher.records import BadRecord, Stage
from thresher.sources.bad_rows import bad_row
from thresher.sources.base import Shard
from thresher.worker.tasks import WorkerSetup


@dataclass(frozen=True)
class Rows:
    """A chunk's rows with what it takes to report any of them as a bad record."""

    setup: WorkerSetup
    shard: Shard
    table: pa.Table
    positions: np.ndarray

    def bad(self, index: int, stage: Stage, error: str, message: str) -> BadRecord:
        return bad_row(
            self.setup.reader,
            self.shard,
            (self.table, self.positions),
            index=index,
            id_column=self.setup.id_column,
            why=(stage, error, message),
        )
