"""Models given as Python objects: `model_section` says how a job's workers get one, and
`load_object` (`kind = "object"`) turns one into the Model its library's adapter makes.

Where a registered kind reads the object's own saved form, the object is saved in it and
that kind loads it: a LightGBM or XGBoost booster (or its scikit-learn wrapper) as its
native file, so its trees are compiled as a spec's are; an ONNX Runtime session as the
model file it was opened on. Every other object travels as a cloudpickle (as Ray sends
one to its actors: classes and functions defined in a notebook or a script travel by
value) and is adapted when loaded: a scikit-learn estimator or pipeline as `sklearn`
does, a SentenceTransformer as `sentence-transformers`, a transformers pipeline as
`transformers`, a `torch.nn.Module` as `torch`; anything else with `predict` (and
`predict_proba` for `outputs = ["proba"]`), a function of a batch, or a class whose
instances are (built once per worker: a Ray Data `map_batches` class) as `python`.

A job run in the calling process (`predict`'s, unless given workers) uses the object
itself, never a copy: `live` holds it under its `object:` uri for as long as the call
runs. Boosters and sessions are read from their file there too (the trees compiled).

The zygote loads an object before it forks the workers when its library is torch's
(`TORCH_LIBRARIES`), so the workers share its weights' pages: a SentenceTransformer given
to `predict` costs its memory once, not once per worker (`executors/zygote.py`).
"""

from __future__ import annotations

import contextlib
import secrets
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.errors import ModelLoadError, SpecError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.features import to_batch_format
from thresher.models.options import TORCH_LIBRARIES, ObjectOptions
from thresher.models.outputs import proba_columns, proba_names
from thresher.spec import ModelSection

__all__ = ["live", "load_object", "model_section"]

NATIVE_LIBRARIES = frozenset({"lightgbm", "xgboost", "onnxruntime"})
_LIVE: dict[str, Any] = {}  # `object:<token>` -> the caller's own object, while it runs


def library_of(model: Any) -> str:
    """The top-level package an object's class comes from (`__main__` for the caller's)."""
    kind = model if isinstance(model, type) else type(model)
    return kind.__module__.split(".")[0]


@contextlib.contextmanager
def live(model: Any) -> Iterator[str]:
    """An `object:` uri for `model`, which `load_object` in this process resolves to the
    object itself while the block runs."""
    uri = f"object:{secrets.token_hex(8)}"
    _LIVE[uri] = model
    try:
        yield uri
    finally:
        del _LIVE[uri]


def model_section(
    model: Any, folder: Path, options: Mapping[str, Any], uri: str | None = None
) -> dict[str, Any]:
    """The `[model]` section for `model`: its native file and kind where a registered
    kind reads one, else `kind = "object"` at `uri` (a `live` one) or, with none, at a
    cloudpickle written to `folder`. `options` are the caller's (outputs, batch_format,
    model options)."""
    library = library_of(model)
    section: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
    extra = dict(section.pop("options", None) or {})
    # In this process (`uri`) the object itself runs, but for those whose registered
    # kind reads their file: a session's model, a booster's trees, compiled.
    travels = uri is None or library in NATIVE_LIBRARIES
    native = _native_file(model, library, folder) if travels else None
    if native is not None:
        kind, path, implied = native
        return {**section, "kind": kind, "uri": str(path), "options": {**implied, **extra}}
    if uri is None:
        uri = str(_pickle(model, folder))
    # The caller handed this object over itself: loading it runs nothing they did not.
    return {
        **section,
        "kind": "object",
        "uri": uri,
        "trust": True,
        "options": {"library": library, **extra},
    }


def load_object(spec: ModelSection, context: LoadContext) -> Model:
    """The `object` kind: the object at `spec.uri` (a live one, or a cloudpickle), adapted."""
    if spec.uri in _LIVE:
        model = _LIVE[spec.uri]
    else:
        if not spec.trust:
            raise ModelLoadError(
                f"model.trust: {spec.uri} is a pickle, which runs code when loaded; set"
                " model.trust = true if you made it"
            )
        import cloudpickle

        with open(spec.uri, "rb") as file:
            model = cloudpickle.load(file)
    return adapt(model, spec, context)


def adapt(model: Any, spec: ModelSection, context: LoadContext) -> Model:
    """The Model an object's library's adapter makes of it (see the module docstring)."""
    options = ObjectOptions.model_validate(spec.options)
    library = library_of(model)
    if isinstance(model, type):  # a class (Ray Data's way): one instance per worker
        model = model()
        setup = getattr(model, "setup", None)
        if callable(setup):
            setup()
    if library in ("sklearn", "imblearn") or _is_estimator(model):
        from thresher.models.sklearn import SklearnModel

        return SklearnModel(model, spec.outputs, context)
    if library in TORCH_LIBRARIES:
        return _torch_model(model, library, spec, options, context)
    if callable(getattr(model, "predict_proba", None)) and "proba" in spec.outputs:
        return ProbaModel(model, spec, context)
    if callable(getattr(model, "predict", None)) or callable(model):
        from thresher.models.python import PythonModel

        return PythonModel(model, spec.batch_format, context.features)
    raise ModelLoadError(
        f"model: a {type(model).__name__} has neither predict(batch) nor __call__(batch);"
        " pass a fitted model, a function of a batch, or a path with kind"
    )


def _is_estimator(model: Any) -> bool:
    """Duck-typed scikit-learn: fitted parameters and a predict."""
    return callable(getattr(model, "get_params", None)) and callable(
        getattr(model, "predict", None)
    )


def _booster_of(model: Any, library: str) -> Any:
    if library == "lightgbm":
        return getattr(model, "booster_", model)
    get_booster = getattr(model, "get_booster", None)
    return get_booster() if callable(get_booster) else model


def _torch_model(
    model: Any, library: str, spec: ModelSection, options: ObjectOptions, context: LoadContext
) -> Model:
    import torch

    from thresher.models.torch import TorchModel, torch_device

    torch.set_num_threads(context.threads)
    device = torch_device(options.device)
    if library == "sentence_transformers":
        from thresher.models.text import LibraryEncoder, SentenceTransformerModel, text_column

        encoder = LibraryEncoder(model.to(device), type(model).__name__)
        return SentenceTransformerModel(
            encoder, text_column(spec, context), options.normalize, False
        )
    if library == "transformers" and hasattr(model, "task"):
        from thresher.models.transformers import pipeline_model

        return pipeline_model(model, spec, context)
    if isinstance(model, torch.nn.Module):
        return TorchModel(model.to(device).eval(), device)
    raise ModelLoadError(
        f"model: a {type(model).__name__} from {library}; pass a pipeline(...) or an"
        " nn.Module (a bare transformers model needs its tokenizer: a pipeline holds both)"
    )


class ProbaModel:
    """An object with `predict_proba` (and `classes_`, if it has them) that is not a
    scikit-learn estimator: `proba_<class>` columns, and `prediction` the likeliest."""

    def __init__(self, model: Any, spec: ModelSection, context: LoadContext) -> None:
        self._model = model
        self._format = spec.batch_format
        self._want_prediction = "prediction" in spec.outputs
        self._classes = getattr(model, "classes_", None)

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        proba = np.asarray(self._model.predict_proba(to_batch_format(batch, self._format)))
        proba = proba.reshape(len(proba), -1)
        classes = self._classes if self._classes is not None else range(proba.shape[1])
        labels = np.asarray(classes)
        columns: dict[str, Column] = dict(proba_columns(proba_names(labels), proba))
        if self._want_prediction:
            columns["prediction"] = labels[np.argmax(proba, axis=1)]
        return columns


def _native_file(model: Any, library: str, folder: Path) -> tuple[str, Path, dict[str, Any]] | None:
    """(kind, file, options) for an object a registered kind reads from its own file."""
    folder.mkdir(parents=True, exist_ok=True)
    if library in ("lightgbm", "xgboost") and not isinstance(model, type):
        classes = getattr(model, "classes_", None)
        implied = {"classes": np.asarray(classes).tolist()} if classes is not None else {}
        return library, _booster_file(_booster_of(model, library), library, folder), implied
    if library == "onnxruntime":
        return "onnx", _onnx_file(model, folder), {}
    return None


# A booster saved once per state: saving 200 trees takes 8 ms, a call on 1,000 rows 5.
_SAVED: weakref.WeakKeyDictionary[Any, tuple[int, Path, Path]] = weakref.WeakKeyDictionary()


def _booster_file(booster: Any, library: str, folder: Path) -> Path:
    """The booster's native file in `folder`, written again only when it has more (or
    fewer) trees than when it was last written there."""
    if library == "lightgbm":
        trees, suffix = booster.num_trees(), ".txt"
    else:
        trees, suffix = booster.num_boosted_rounds(), ".ubj"
    saved = _SAVED.get(booster)
    if saved is not None and saved[:2] == (trees, folder) and saved[2].exists():
        return saved[2]
    path = folder / f"{library}-{secrets.token_hex(4)}{suffix}"
    booster.save_model(str(path))
    named = _by_content(path)
    with contextlib.suppress(TypeError):  # a booster that takes no weak reference
        _SAVED[booster] = (trees, folder, named)
    return named


def _onnx_file(session: Any, folder: Path) -> Path:
    """The file an ONNX Runtime session was opened on, or its bytes written to one."""
    path = getattr(session, "_model_path", None)
    if path:
        return Path(path)
    data = getattr(session, "_model_bytes", None)
    if not data:
        raise SpecError(
            ["model: this InferenceSession keeps no model file or bytes; pass its path"]
        )
    written = folder / f"onnx-{secrets.token_hex(4)}.onnx"
    written.write_bytes(data)
    return _by_content(written)


def _pickle(model: Any, folder: Path) -> Path:
    """`model` as a cloudpickle in `folder`, named by its content."""
    import cloudpickle

    path = folder / f"model-{secrets.token_hex(4)}.cloudpickle"
    try:
        with open(path, "wb") as file:
            cloudpickle.dump(model, file)
    except Exception as exc:
        path.unlink(missing_ok=True)
        raise SpecError(
            [
                f"model: a {type(model).__name__} cannot be sent to worker processes"
                f" ({type(exc).__name__}: {exc}); save it and pass the file's path with"
                " kind=, or leave what cannot be pickled (an open file, a lock, a"
                " connection) to a setup() method, which runs in each worker"
            ]
        ) from exc
    return _by_content(path)


def _by_content(path: Path) -> Path:
    """`path` renamed to its content's SHA-256, so the same model always has the same
    file: a job's fingerprint, and the compiled trees' cache, follow it."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 22), b""):
            digest.update(block)
    named = path.with_name(f"{digest.hexdigest()}{path.suffix}")
    path.replace(named)
    return named
