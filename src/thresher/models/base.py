"""The model contract: load once per worker, then predict batch after batch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import numpy as np
import pyarrow as pa

from thresher.spec import ModelSection

Column: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray


class Model(Protocol):
    """A loaded model. `predict` gets only the feature columns, in the spec's order, and
    returns named output columns with exactly one value per input row."""

    def predict(self, batch: pa.Table) -> Mapping[str, Column]: ...


class ModelLoader(Protocol):
    """What a `kind` names: turns the `[model]` section into a loaded Model."""

    def __call__(self, spec: ModelSection, context: LoadContext) -> Model: ...


@dataclass(frozen=True)
class LoadContext:
    """What a loader may need besides its section: the feature names and its thread budget."""

    features: tuple[str, ...]
    threads: int = 1
