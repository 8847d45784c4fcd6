"""How a CSV or JSONL input's columns are typed: from a sample, once, by what each is for.

Arrow infers types from the sample's values alone, and one value decides a whole column:
a `1.5` among whole numbers makes it float64, a word makes it text. That is right for no
column in particular, so the inferred schema is corrected by role:

- model inputs are float64 whenever the sample shows them as (mostly) numbers: a sample
  of whole numbers, or one stray `n/a`, must not decide how later rows parse;
- the id column is never a float, whose 53-bit mantissa rounds ids past 2^53 so that
  distinct ids merge: it is int64 (a stray `1.5`, `1e30` or a number past int64 is then
  a bad record naming its line), or text when its values are text;
- other CSV columns of whole numbers but for a stray one in a hundred are int64.

Every lookup is by set or dict: an input of 50,000 columns must not plan in quadratic time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pyarrow as pa

INT64 = range(-(2**63), 2**63)
STRAY_SHARE = 0.01  # at most this share of a column's sample values may be strays


def typed_schema(
    inferred: pa.Schema,
    inputs: Collection[str],
    id_column: str | None,
    untyped: bool,
    parse_sample: Callable[[pa.Schema], pa.Table],
) -> pa.Schema:
    """The schema every shard is read with: `inferred` (the sample's) corrected by role.

    `untyped`: the format's values are bare text (CSV), so a type is only ever a guess;
    JSON values carry their own. `parse_sample` reads the sample with a given schema, bad
    lines left out: text columns are judged on their values.
    """
    if untyped and id_column in inferred.names:
        # A CSV id is judged on its text: Arrow would have made a float of one `1.5`.
        index = inferred.get_field_index(id_column)
        inferred = inferred.set(index, inferred.field(index).with_type(pa.string()))
    types = dict(zip(inferred.names, inferred.types, strict=True))
    roles = set(inputs) & types.keys()
    texts = {name for name, kind in types.items() if is_text_type(kind)}
    parsed = parse_sample(inferred) if texts and (untyped or texts & roles) else None
    floats = _numeric(types, roles, texts, parsed)
    ints = _whole(texts - roles, parsed) if untyped else set()
    if id_column is not None and id_column in types:
        floats.discard(id_column)
        if untyped:
            ints |= _whole({id_column} & texts, parsed)
        elif is_number_type(types[id_column]) and not pa.types.is_null(types[id_column]):
            ints.add(id_column)
    return _retyped(inferred, floats, ints)


def most_common_types(schemas: list[pa.Schema]) -> pa.Schema:
    """Each column's most frequent type over per-line schemas (null only if always null);
    the lines of the other types then become bad records."""
    votes: dict[str, Counter[pa.DataType]] = {}
    for schema in schemas:
        for column in schema:
            counts = votes.setdefault(column.name, Counter())
            counts[column.type] += 0 if pa.types.is_null(column.type) else 1
    return pa.schema([(name, counts.most_common(1)[0][0]) for name, counts in votes.items()])


def is_number_type(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind))


def is_text_type(kind: pa.DataType) -> bool:
    # Arrow infers bytes for a CSV column holding invalid UTF-8: text, with a bad line in it.
    return bool(pa.types.is_string(kind) or pa.types.is_binary(kind))


def int64(text: str) -> int:
    """`text` as an int64, or ValueError: what Arrow's int64 conversion will accept.

    >>> int64("9007199254740993")
    9007199254740993
    >>> int64("99999999999999999999")
    Traceback (most recent call last):
    ...
    ValueError: 99999999999999999999 is beyond int64
    """
    number = int(text)
    if number not in INT64:
        raise ValueError(f"{text} is beyond int64")
    return number


def _numeric(
    types: Mapping[str, pa.DataType],
    inputs: set[str],
    texts: set[str],
    parsed: pa.Table | None,
) -> set[str]:
    """Model inputs to read as float64: those the sample shows as numbers, and text
    ones whose sample values are mostly numbers (a stray "n/a" must not turn a
    numeric column into text). Real text columns (for text models) stay text."""
    numeric = {name for name in inputs if is_number_type(types[name])}
    if parsed is not None:
        numeric |= {n for n in inputs & texts if _share_parsed(parsed.column(n), float) >= 0.5}
    return numeric


def _whole(texts: set[str], parsed: pa.Table | None) -> set[str]:
    """Text columns whose sample values are int64s but for a stray one in a hundred (an
    id column with one `id-10`): read as int64, so the stray lines are bad records, as
    in JSONL, rather than every value of the file turning to text."""
    if parsed is None:
        return set()
    return {n for n in texts if _share_parsed(parsed.column(n), int64) >= 1 - STRAY_SHARE}


def _share_parsed(column: pa.ChunkedArray, parse: Callable[[str], Any]) -> float:
    """The share of a text column's non-empty values that `parse` (float, int64)
    accepts; 0 for a column with none."""
    values = [v for v in column.to_pylist() if v not in (None, "")]
    parsed = 0
    for value in values:
        try:
            parse(value)
            parsed += 1
        except ValueError:
            continue
    return parsed / len(values) if values else 0.0


def _retyped(schema: pa.Schema, float_columns: set[str], int_columns: set[str]) -> pa.Schema:
    """Model inputs as float64, whole-number columns as int64; bytes as text (Arrow
    infers bytes only from invalid UTF-8, which must then be a bad record, not a column
    type)."""
    fields = []
    for column in schema:
        if column.name in float_columns:
            fields.append(column.with_type(pa.float64()))
        elif column.name in int_columns:
            fields.append(column.with_type(pa.int64()))
        elif pa.types.is_binary(column.type) or pa.types.is_null(column.type):
            fields.append(column.with_type(pa.string()))
        else:
            fields.append(column)
    return pa.schema(fields)
