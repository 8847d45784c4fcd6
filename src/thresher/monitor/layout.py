"""How a shard profiler walks a chunk's columns, worked out once per schema: each column's
profile, and which columns are numeric, so may go the way of plain doubles (taken
together, see `ShardProfiler._add_plain`). Per chunk only what can change from chunk to
chunk is checked (whether a column's part is what `moments.is_plain_double` takes,
whether it still keeps a probability histogram): looking each column up and working out
its kind, chunk after chunk, was a good part of what profiling a chunk cost."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from thresher.moments import is_plain_double
from thresher.monitor.profile import ColumnProfile, Kind, Role

__all__ = ["Layout", "Plain", "column_kind"]


def column_kind(type_: pa.DataType, role: Role) -> Kind:
    """How a column of this type is profiled. Integer outputs are class labels."""
    if pa.types.is_boolean(type_) or pa.types.is_dictionary(type_):
        return "categorical"
    if pa.types.is_integer(type_):
        return "categorical" if role == "output" else "numeric"
    if pa.types.is_floating(type_) or pa.types.is_decimal(type_):
        return "numeric"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "categorical"
    return "other"


@dataclass(frozen=True)
class Plain:
    """A chunk's columns of plain doubles: their profiles, their one part each, and their
    names (the key `RunningMoments` and `WaitingSamples` keep them by)."""

    columns: list[ColumnProfile]
    arrays: list[pa.Array]
    names: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    schema: pa.Schema
    columns: list[ColumnProfile]  # by position in the schema
    numeric: list[int]  # plain doubles, when one part `is_plain_double` takes
    others: list[int]

    @classmethod
    def of(cls, schema: pa.Schema, role: Role, profiled: dict[str, ColumnProfile]) -> Layout:
        """The layout of `schema`'s columns, each one's profile taken from `profiled`
        (added there when it is new)."""
        columns: list[ColumnProfile] = []
        numeric: list[int] = []
        others: list[int] = []
        for position, field in enumerate(schema):
            column = profiled.get(field.name)
            if column is None:
                column = ColumnProfile.empty(field.name, role, column_kind(field.type, role))
                profiled[field.name] = column
            columns.append(column)
            (numeric if column.kind == "numeric" else others).append(position)
        return cls(schema, columns, numeric, others)

    @functools.cached_property
    def all_numeric(self) -> tuple[list[ColumnProfile], tuple[str, ...]]:
        """The numeric columns' profiles and names: the plain ones, as a rule."""
        columns = [self.columns[i] for i in self.numeric]
        return columns, tuple(column.name for column in columns)

    def split(
        self, table: pa.Table
    ) -> tuple[Plain | None, list[tuple[ColumnProfile, pa.ChunkedArray]]]:
        """`table`'s columns (of this layout's schema): the plain doubles (None when there
        are none), and the rest."""
        # A table in one part, the rule for a model's inputs, gives all its arrays at once:
        # a ChunkedArray and then its part, column by column, were most of this.
        batches = table.to_batches()
        arrays = batches[0].columns if len(batches) == 1 else None
        plain: list[int] = []
        parts: list[pa.Array] = []
        rest = [(self.columns[i], table.column(i)) for i in self.others]
        for i in self.numeric:
            column = self.columns[i]
            part = _only_part(table.column(i)) if arrays is None else arrays[i]
            if column.probability is None and part is not None and is_plain_double(part):
                plain.append(i)
                parts.append(part)
            else:
                rest.append((column, table.column(i)))
        if not plain:
            return None, rest
        if len(plain) == len(self.numeric):  # every numeric column: worked out once
            columns, names = self.all_numeric
        else:
            columns = [self.columns[i] for i in plain]
            names = tuple(column.name for column in columns)
        return Plain(columns, parts, names), rest


def _only_part(values: pa.ChunkedArray) -> pa.Array | None:
    return values.chunk(0) if values.num_chunks == 1 else None
