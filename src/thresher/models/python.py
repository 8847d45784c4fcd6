"""Your own model class: `kind = "python"`, `uri = "pkg.module:Class"` or `"path/file.py:Class"`.

The contract is one small class:

    class Scorer:
        def __init__(self, threshold=0.5):    # gets model.options as keyword arguments
            self.threshold = threshold

        def setup(self):                      # optional: runs once per worker, before batches
            self.weights = load_weights()

        def predict(self, batch):             # batch as model.batch_format says
            return {"prediction": batch["x"] > self.threshold}

A class written for Ray Data's `map_batches` works unchanged: without `predict`, the
instance itself is called with each batch (`__call__(batch)`, its constructor loading the
model), and the batch it returns with its predictions added gives the predictions alone
(a returned column named as a model input is the input's, not an output). Ray's default
batch is a dict of numpy arrays: `batch_format = "numpy"`.

A misspelt option stops the job before any work: `model.options` are checked against the
`__init__` parameters in the class's source, read without importing it (`user_code.py`).

`batch_format` is `pandas` (a DataFrame, the default), `numpy` (a dict of 1-D arrays) or
`arrow` (a `pa.Table`). `predict` may return a dict of columns, a DataFrame, an Arrow
Table or RecordBatch, or a single array, list or Series, which becomes `prediction`.

Loading this kind imports and runs the named code, so it needs no `model.trust`: the
job's author chose the code to run, as with any Python they import. Point `uri` only at
code you would run yourself.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from thresher.errors import ModelLoadError
from thresher.media.prepare import ImagePreparer
from thresher.models.base import Column, Failures, LoadContext, Model
from thresher.models.features import BatchFormat, to_batch_format
from thresher.models.outputs import as_columns
from thresher.spec import ModelSection


def load_python(spec: ModelSection, context: LoadContext) -> Model:
    """Import the class `spec.uri` names, build it with `**spec.options`, run `setup()`.

    Raises ModelLoadError when the class cannot be found, has no `predict`, or rejects
    the options.
    """
    cls = import_target(spec.uri)
    if not isinstance(cls, type):
        raise ModelLoadError(f"model.uri: {spec.uri} is a {type(cls).__name__}, not a class")
    if not callable(getattr(cls, "predict", None)) and "__call__" not in dir(cls):
        raise ModelLoadError(
            f"model.uri: {cls.__name__} has no predict(batch) method; a python model needs"
            " one, or __call__(batch) as a Ray Data map_batches class has (and may have a"
            " setup())"
        )
    try:
        instance = cls(**spec.options)
    except TypeError as exc:
        raise ModelLoadError(
            f"model.options: {cls.__name__}({', '.join(spec.options)}) failed: {exc}"
        ) from exc
    setup = getattr(instance, "setup", None)
    if callable(setup):
        setup()
    return PythonModel(instance, spec.batch_format, context.features, context.threads)


class PythonModel:
    """A user's model object or function; `predict` hands it each batch in its format:
    to its `predict`, else to the object itself (a function, a `__call__`). Image files
    among its inputs (an `images` source's `image`) reach it decoded: a `(height, width,
    3)` uint8 array per row (see `prepare`)."""

    def __init__(
        self, instance: Any, batch_format: BatchFormat, inputs: Sequence[str], threads: int = 1
    ) -> None:
        predict = getattr(instance, "predict", None)
        self._call = predict if callable(predict) else instance
        self._batch_format = batch_format
        self._inputs = frozenset(inputs)
        self._images = ImagePreparer(threads=threads)

    def prepare(self, table: pa.Table) -> tuple[pa.Table, Failures]:
        """The chunk's image files decoded, on the worker's reading thread; a table
        without any, as it is."""
        table, failures = self._images.prepare(table)
        return table, failures  # type: ignore[return-value]

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """The user's predict on this batch, its result normalized to named columns,
        less the input columns it handed back (see the module docstring)."""
        result = self._call(to_batch_format(batch, self._batch_format))
        columns = as_columns(result)
        return {name: column for name, column in columns.items() if name not in self._inputs}


def import_target(uri: str) -> Any:
    """The object `pkg.module:Name` or `path/file.py:Name` names (`Name` may be dotted)."""
    target, colon, attribute = uri.rpartition(":")
    if not colon or not target or not attribute:
        raise ModelLoadError(
            f"model.uri: {uri!r} should be pkg.module:Class or path/to/file.py:Class"
        )
    module = _import_file(Path(target)) if target.endswith(".py") else _import_module(target)
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ModelLoadError(f"model.uri: {target} has no {attribute}") from None
    return value


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ModelLoadError(
            f"model.uri: cannot import {name} ({exc}); install it or add it to PYTHONPATH"
        ) from exc


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise ModelLoadError(f"model.uri: {path} is not a file")
    # A name unique to the file keeps two models called model.py apart, and registering
    # it in sys.modules lets the file's dataclasses and pickled objects find their module.
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    name = f"thresher_user_model_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"model.uri: cannot import {path} as Python code")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
