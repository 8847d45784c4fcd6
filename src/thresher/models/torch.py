"""PyTorch models: `torch.export` programs, TorchScript, or your nn.Module with its weights.

`model.uri` is one of:

- `model.pt2`: a program saved with `torch.export.save`. Safe to load (a graph and its
  weights, no pickled code), and PyTorch's recommended format.
- `model.pt`, `.pth`, `.ts`: a TorchScript archive saved with `torch.jit.save`. Safe to
  load, though PyTorch deprecates TorchScript in favour of `torch.export`. A `.pt` or
  `.pth` that is instead a whole pickled module (`torch.save(model)`) runs code when
  loaded, so it loads only with `model.trust = true`.
- `pkg.module:Class` or `path/file.py:Class`: an nn.Module built with `model.options` as
  keyword arguments (less `device` and `weights`), then given the state dict in
  `model.options.weights`: a `.safetensors` file (safe), or a state dict saved with
  `torch.save` (read with `weights_only=True`, which refuses code).

`model.options.device` is `"auto"` (CUDA when available, else the CPU), `"cpu"`,
`"cuda"` or `"cuda:N"`.

The module gets the feature matrix as one float32 tensor `(rows, features)` and returns a
tensor: `(rows,)` or `(rows, 1)` becomes `prediction`, `(rows, k)` a column of k-vectors;
a dict of tensors becomes one column per key.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from thresher.arrays import to_matrix
from thresher.errors import ModelLoadError, ModelOutputError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.images import image_options, tensor_model
from thresher.models.options import TorchOptions
from thresher.models.outputs import as_column, safe_name
from thresher.models.python import import_target
from thresher.plugins import is_class_uri
from thresher.spec import ModelSection

EXPORT_SUFFIXES = (".pt2",)
SCRIPT_SUFFIXES = (".pt", ".pth", ".ts")
LOADER_OPTIONS = frozenset(TorchOptions.model_fields)  # the rest: the class's arguments


def load_torch(spec: ModelSection, context: LoadContext) -> Model:
    """Load the module `spec.uri` names onto its device, using `context.threads` threads.

    Raises ModelLoadError for a missing file, an unknown suffix, a pickle without trust,
    a class without weights, or `proba` in `model.outputs`.
    """
    refuse_proba(spec, "a torch model's output tensor")
    torch.set_num_threads(context.threads)
    device = torch_device(spec.options.get("device"))
    path = Path(spec.uri)
    if path.suffix.lower() in EXPORT_SUFFIXES + SCRIPT_SUFFIXES:
        module = read_module(path, device, spec.trust)
    elif is_class_uri(spec.uri):
        module = _build_module(spec, device)
    else:
        known = ", ".join(EXPORT_SUFFIXES + SCRIPT_SUFFIXES)
        raise ModelLoadError(
            f"model.uri: {spec.uri} is neither a model file ({known}) nor pkg.module:Class"
        )
    image = image_options(spec.options)
    if image is not None:
        column = spec.options.get("image_column")
        return tensor_model(module_runner(module, device), image, context.threads, column)
    return TorchModel(module, device)


def module_runner(module: Any, device: torch.device) -> Callable[[np.ndarray], Any]:
    """A module as a function of a float32 batch: its output tensor (or dict of tensors)
    as numpy."""

    def run(batch: np.ndarray) -> Any:
        # A view of Arrow's buffers is read-only, which torch warns of: copy those.
        writable = np.require(batch, requirements=["W"])
        with torch.inference_mode():
            result = module(torch.from_numpy(writable).to(device))
        if isinstance(result, Mapping):
            return {key: _to_numpy(value) for key, value in result.items()}
        return _to_numpy(result)

    return run


def torch_device(option: Any) -> torch.device:
    """The device `model.options.device` names; `"auto"` (or none) picks CUDA if present."""
    name = "auto" if option is None else str(option)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(
            f"model.options.device: {name!r} asks for CUDA, which this torch build or machine"
            " lacks; set device = 'cpu' or 'auto', or install a CUDA build of torch"
        )
    try:
        return torch.device(name)
    except RuntimeError as exc:
        raise ModelLoadError(
            f"model.options.device: {name!r} is not a device; use 'auto', 'cpu' or 'cuda:N'"
        ) from exc


def refuse_proba(spec: ModelSection, what: str) -> None:
    """Reject `proba` for a kind whose output is not a set of class probabilities."""
    if "proba" in spec.outputs:
        raise ModelLoadError(
            f"model.outputs: kind {spec.kind} writes {what}, not class probabilities;"
            " remove 'proba' from model.outputs"
        )


class TorchModel:
    """A loaded module; `predict` runs it on each batch's float32 feature matrix."""

    def __init__(self, module: Any, device: torch.device) -> None:
        self._module = module
        self._device = device

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch of feature rows."""
        inputs = torch.from_numpy(to_matrix(batch, np.float32)).to(self._device)
        with torch.inference_mode():
            result = self._module(inputs)
        if isinstance(result, torch.Tensor):
            return {"prediction": as_column(_to_numpy(result))}
        if isinstance(result, Mapping):
            return {
                safe_name(key): as_column(_to_numpy(value), str(key))
                for key, value in result.items()
            }
        raise ModelOutputError(
            f"the torch model returned a {type(result).__name__}; return a tensor with one"
            " row per input row, or a dict of such tensors"
        )


def read_module(path: Path, device: torch.device, trust: bool) -> Any:
    """The module a `.pt2` program or TorchScript file (or, trusted, a pickle) holds."""
    if not path.is_file():
        raise ModelLoadError(f"model.uri: {path} is not a file; point it at the saved model")
    if path.suffix.lower() in EXPORT_SUFFIXES:
        program = torch.export.load(str(path))
        if device.type != "cpu":
            from torch.export.passes import move_to_device_pass

            program = move_to_device_pass(program, device)
        return program.module()
    if _is_torchscript(path):
        return torch.jit.load(str(path), map_location=device).eval()  # type: ignore[no-untyped-call]
    if not trust:
        raise ModelLoadError(
            f"model.uri: {path.name} is a torch.save pickle, and loading a pickled module runs"
            " whatever code it holds. Set model.trust = true if you trust the file, or save it"
            " safely: torch.export.save(torch.export.export(model, (example,)), 'model.pt2')."
            " If it holds a state dict, set uri = 'pkg.module:Class' and model.options.weights"
            " to the file"
        )
    module = torch.load(str(path), map_location=device, weights_only=False)
    if not callable(module):
        raise ModelLoadError(
            f"model.uri: {path.name} holds a {type(module).__name__}, not a module; for a"
            " state dict, set uri = 'pkg.module:Class' and model.options.weights to the file"
        )
    return module.eval() if isinstance(module, torch.nn.Module) else module


def _is_torchscript(path: Path) -> bool:
    """Whether a `.pt` archive is TorchScript (it holds `code/`) rather than a pickle."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in name for name in archive.namelist())
    except zipfile.BadZipFile:
        return False  # the legacy (pre-1.6) torch.save format: a pickle


def _build_module(spec: ModelSection, device: torch.device) -> torch.nn.Module:
    cls = import_target(spec.uri)
    kwargs = {k: v for k, v in spec.options.items() if k not in LOADER_OPTIONS}
    weights = spec.options.get("weights")
    if weights is None:
        raise ModelLoadError(
            f"model.options.weights: {spec.uri} needs its trained weights; set weights ="
            " 'model.safetensors' (safetensors.torch.save_file(model.state_dict(), ...))"
        )
    try:
        module = cls(**kwargs)
    except TypeError as exc:
        raise ModelLoadError(
            f"model.options: {getattr(cls, '__name__', cls)}({', '.join(kwargs)}) failed: {exc}"
        ) from exc
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(f"model.uri: {spec.uri} built a {type(module).__name__}, not a Module")
    module.load_state_dict(_read_state_dict(Path(str(weights))))
    return module.to(device).eval()


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ModelLoadError(f"model.options.weights: {path} is not a file")
    if path.suffix.lower() == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as exc:  # safetensors raises its own error type
            raise ModelLoadError(
                f"model.options.weights: {path} is not a readable safetensors file ({exc})"
            ) from exc
    # weights_only refuses anything but tensors and plain containers: no code runs.
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ModelLoadError(
            f"model.options.weights: {path} is not a state dict torch.load can read safely ({exc})"
        ) from exc
    if not isinstance(state, dict):
        raise ModelLoadError(
            f"model.options.weights: {path.name} holds a {type(state).__name__}, not a"
            " state dict; save model.state_dict()"
        )
    return state


def _to_numpy(tensor: Any) -> np.ndarray:
    if not isinstance(tensor, torch.Tensor):
        raise ModelOutputError(f"the torch model returned a {type(tensor).__name__}, not a tensor")
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16
        tensor = tensor.float()
    array: np.ndarray = tensor.numpy()
    return array
