"""Model adapters: the `[model]` section's `kind` picks a loader, the loader returns a Model.

    >>> context = LoadContext(features=("age", "income"), threads=4)
    >>> model = load_model(spec.model, context)  # doctest: +SKIP
    >>> columns = model.predict(batch)  # doctest: +SKIP

`columns` maps output names to arrays: `{"prediction": array, ...}`.

Built-in kinds are listed in `ADAPTERS` as dotted paths and imported only when used, so
importing thresher never imports scikit-learn or onnxruntime. A kind containing `:` is
a third party's loader, `"mypkg.adapters:load_mine"`: any callable
`(spec: ModelSection, context: LoadContext) -> Model`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from pathlib import Path

from thresher.errors import ModelLoadError, ThresherError, unknown_key
from thresher.loops import patience
from thresher.models.base import LoadContext, Model, ModelLoader
from thresher.models.user_code import class_arguments, code_file, module_file
from thresher.plugins import BUILTINS, Kind, ModelUri, Plugin, PluginError, find, lookup
from thresher.spec import ModelSection

__all__ = [
    "ADAPTERS",
    "LoadContext",
    "Model",
    "ModelLoader",
    "check_model_section",
    "load_model",
    "model_fingerprint",
]

log = logging.getLogger("thresher.models")

# The built-in kinds and their loaders (plugins.BUILTINS holds them, with the rest).
ADAPTERS: dict[str, str] = {p.name: p.factory for p in BUILTINS if p.kind == Kind.MODEL}
_HASH_CHUNK = 1024 * 1024


def load_model(spec: ModelSection, context: LoadContext) -> Model:
    """Load the model the `[model]` section describes, once per worker.

    Every failure is a ModelLoadError that names the kind and uri and says what to do.
    """
    if not spec.outputs:
        raise ModelLoadError("model.outputs: is empty; list 'prediction', 'proba' or both")
    loader = resolve_loader(spec.kind)
    try:
        with patience(f"{spec.uri}: loading the {spec.kind} model", log):
            model = loader(spec, context)
    except ThresherError:
        raise
    except ModuleNotFoundError as exc:
        plugin = _plugin(spec.kind)
        extra = plugin.extra if plugin else None
        hint = f"pip install 'thresher[{extra}]'" if extra else f"install {exc.name}"
        raise ModelLoadError(f"model.kind: {spec.kind} needs {exc.name}; {hint}") from exc
    except Exception as exc:
        # A corrupt file or a failing setup() raises anything; the engine needs one error
        # type at the load stage, and the user needs the file and the original message.
        raise ModelLoadError(
            f"model.uri: cannot load {spec.uri} as {spec.kind}: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(model, "predict", None)):
        raise ModelLoadError(
            f"model.kind: {spec.kind} returned a {type(model).__name__}, which has no predict()"
        )
    return model


def check_model_section(spec: ModelSection) -> list[str]:
    """What is wrong with a `[model]` section that can be seen without loading it: an
    unknown kind, a loader module that is not there, a model file that is missing, an
    option a user's class does not take. The coordinator asks before any work, so a typo
    never costs the previous output."""
    try:
        plugin = find(Kind.MODEL, spec.kind)
    except PluginError as exc:
        return [str(exc)]
    if plugin.factory == spec.kind:  # a loader of the user's own: is its module there?
        module = spec.kind.partition(":")[0]
        if module_file(module) is None:
            return [f"model.kind: no module {module!r} on the path (from {spec.kind!r})"]
    path = _local_model_file(spec, plugin)
    if path is not None and not Path(path).is_file():
        return [f"model.uri: {path} is not a file; point it at the saved model"]
    return _argument_problems(spec, plugin) if plugin.builds_class(spec.uri) else []


def _local_model_file(spec: ModelSection, plugin: Plugin) -> str | None:
    """The one local file the model's uri must be, if its plug-in says so."""
    if "://" in spec.uri:
        return None
    if plugin.builds_class(spec.uri):  # `file.py:Class`; for `pkg.module:Class` the worker
        path = spec.uri.rpartition(":")[0]  # finds the module on its path
        return path if path.endswith(".py") else None
    return spec.uri if plugin.model_uri in (ModelUri.FILE, ModelUri.FILE_OR_CLASS) else None


def _argument_problems(spec: ModelSection, plugin: Plugin) -> list[str]:
    """The options of a class-building plug-in that are neither its own nor arguments
    the class's source declares (`models/user_code.py`)."""
    accepted = class_arguments(spec.uri)
    if accepted is None:
        return []  # the source does not say: the class refuses a wrong one itself
    own = plugin.options_model()
    known = [*accepted, *(own.model_fields if own else ())]
    takes = ", ".join(known) or "no options"
    name = spec.uri.rpartition(":")[2]
    return [
        f"model.options.{key}: {unknown_key(key, known)}; {name} takes {takes}"
        for key in spec.options
        if key not in known
    ]


def resolve_loader(kind: str) -> ModelLoader:
    """The loader a kind names: a registered model plug-in (a built-in or an entry
    point's), or `module:function` (see plugins.py)."""
    try:
        loader: ModelLoader = find(Kind.MODEL, kind).load()
    except PluginError as exc:
        raise ModelLoadError(str(exc)) from exc
    return loader


def model_fingerprint(spec: ModelSection) -> dict[str, str | None]:
    """`{"uri": ..., "sha256": ...}` for the run manifest.

    The digest is of the model file; for a python model, of the source file that defines
    the class (`file.py:Class`, or `pkg.module:Class` when the module's file can be found
    without importing it). It is None when there is no local file to hash.
    """
    path: Path | None = Path(spec.uri)
    plugin = lookup(Kind.MODEL, spec.kind)
    if plugin is not None and plugin.model_uri is ModelUri.CLASS and not Path(spec.uri).is_file():
        path = code_file(spec.uri)
    digest = _sha256(path) if path is not None and path.is_file() else None
    return {"uri": spec.uri, "sha256": digest}


def _sha256(path: Path) -> str:
    """The file's digest, read once per version of it in a process: a job asks twice, to
    find the model's earlier jobs (plan/history.py) and for its manifest, and a model
    file can be gigabytes. A file rewritten in place changes its size or mtime."""
    stat = path.stat()
    return _file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _plugin(kind: str) -> Plugin | None:
    return lookup(Kind.MODEL, kind)
