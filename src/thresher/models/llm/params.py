"""Sampling parameters: the job's defaults (`model.options`), overridden row by row.

A row's parameters come from `model.options.params_column`: a struct column, a map or a
JSON object string, with OpenAI's names — what the OpenAI batch layer passes from each
request line's body. A field a row does not set (or sets to null) keeps the default;
a row with nothing to override holds `{}` (a null value is a missing input, a bad row,
as for any feature).

    >>> defaults = Sampling(max_tokens=16)
    >>> override(defaults, {"max_completion_tokens": 4, "stop": "."}, 1)
    Sampling(max_tokens=4, temperature=0.0, top_p=1.0, stop=('.',), seed=None, n=1)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

# OpenAI's names for what `Sampling` holds; `max_completion_tokens` is the newer name of
# `max_tokens` in chat completions.
KNOWN = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed", "n")
MAX_STOPS = 4  # as OpenAI
# OpenAI parameters thresher does not implement, accepted at the value that changes nothing.
NEUTRAL: dict[str, Any] = {"frequency_penalty": 0, "presence_penalty": 0, "logprobs": False}


@dataclass(frozen=True)
class Sampling:
    """How one row is generated: temperature 0 is greedy decoding (deterministic)."""

    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    n: int = 1

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def defaults(options: Any) -> Sampling:
    """The job's defaults from its `LlmOptions`."""
    values = {key: getattr(options, key) for key in KNOWN if hasattr(options, key)}
    return override(Sampling(), values, max_n=max(int(options.n), 1))


def override(base: Sampling, values: Mapping[str, Any], max_n: int) -> Sampling:
    """`base` with the set fields of `values`; ValueError (a bad row) for an unknown
    name or a value out of range, naming it."""
    # A struct column has every row's fields: the ones a row does not set are null. An
    # OpenAI parameter set to its no-op value (`frequency_penalty: 0`) asks for nothing.
    set_values = {
        key: value
        for key, value in values.items()
        if value is not None and not (key in NEUTRAL and value == NEUTRAL[key])
    }
    unknown = sorted(set(set_values) - set(KNOWN))
    if unknown:
        raise ValueError(
            f"sampling parameter(s) {', '.join(map(repr, unknown))} not supported;"
            f" use {', '.join(KNOWN)}"
        )
    if "max_completion_tokens" in set_values:
        set_values["max_tokens"] = set_values.pop("max_completion_tokens")
    changes: dict[str, Any] = {}
    for key, value in set_values.items():
        changes[key] = _checked(key, value, max_n)
    return replace(base, **changes)


def _checked(key: str, value: Any, max_n: int) -> Any:
    if key == "stop":
        stops = (value,) if isinstance(value, str) else tuple(value)
        if len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
            raise ValueError(f"stop: {value!r}; give up to {MAX_STOPS} non-empty strings")
        return stops
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: {value!r} is not a number")
    if key in ("max_tokens", "n", "seed"):
        if value != int(value) or value < (0 if key == "seed" else 1):
            raise ValueError(f"{key}: {value!r}; use a whole number of at least 1")
        if key == "n" and value > max_n:
            raise ValueError(
                f"n: {value} choices, more than model.options.n = {max_n}; raise"
                " model.options.n (its output columns hold a list of choices then)"
            )
        return int(value)
    if key == "temperature" and not 0.0 <= value <= 2.0:
        raise ValueError(f"temperature: {value!r}; use 0 (greedy) to 2")
    if key == "top_p" and not 0.0 < value <= 1.0:
        raise ValueError(f"top_p: {value!r}; use a number in (0, 1]")
    return float(value)


def row_params(batch: pa.Table, column: str | None, base: Sampling, max_n: int) -> list[Sampling]:
    """Each row's sampling parameters: `base`, overridden by the row's `column` value."""
    if column is None:
        return [base] * batch.num_rows
    return [
        base if value is None else override(base, _as_mapping(value, column), max_n)
        for value in batch.column(column).to_pylist()
    ]


def _as_mapping(value: Any, column: str) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"column {column!r}: not a JSON object: {exc}") from exc
    if isinstance(value, list):  # an Arrow map arrives as a list of (key, value) pairs
        value = dict(value)
    if not isinstance(value, dict):
        raise ValueError(f"column {column!r}: {type(value).__name__}, not an object")
    return value
