"""Arrow arrays built straight from buffers, for the span writers.

pyarrow's conversions from Python or numpy objects (``pa.array``, ``Table.from_pydict``)
first ask its pandas shim whether the input is a pandas object, and the shim imports
pandas if it is installed: ~0.8 s of CPU with the GIL held, once, in whatever process
writes the first Parquet file. In an agent's process that stalls one LLM call and leaves
pandas' objects in every later garbage collection. Buffers assembled with numpy and
handed to ``pa.Array.from_buffers`` never ask, and are as fast for the few column types
of the spans table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa


# The numpy dtype of each fixed-width Arrow type the spans table uses.
_DTYPES = {pa.int64(): np.dtype("<i8"), pa.float64(): np.dtype("<f8"), pa.int32(): np.dtype("<i4"), pa.float32(): np.dtype("<f4")}


def _validity(values: Sequence[Any]) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap (``None`` when nothing is null) and the null count."""
    present = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    nulls = len(values) - int(present.sum())
    return (pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None), nulls


def _offsets(lengths: np.ndarray, what: str) -> pa.Buffer:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError(f"{offsets[-1]} {what} in one column: more than a 32-bit offset can address")
    return pa.py_buffer(offsets.astype(np.int32))


def string_array(values: Sequence[str | None]) -> pa.Array:
    """``TypeError`` for a value that is neither a str nor None."""
    try:
        encoded = [b"" if v is None else v.encode() for v in values]
    except AttributeError as exc:
        raise TypeError(f"expected str or None in a string column: {exc}") from exc
    validity, nulls = _validity(values)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    data = pa.py_buffer(b"".join(encoded))
    return pa.Array.from_buffers(pa.string(), len(values), [validity, _offsets(lengths, "bytes"), data], null_count=nulls)


def number_array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """An int64 or float64 column; ``OverflowError``/``TypeError`` for what does not fit."""
    dtype = _DTYPES[type_]
    validity, nulls = _validity(values)
    data = np.array([0 if v is None else v for v in values], dtype=dtype)
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(data)], null_count=nulls)


def list_array(items: Sequence[bytes | np.ndarray | Sequence | None], type_: pa.ListType) -> pa.Array:
    """A list column from per-row items (None: no list): little-endian bytes of the value
    type, numpy arrays or sequences. One concatenation, no conversion per item."""
    dtype = _DTYPES[type_.value_type]
    raw = [x if x is None or type(x) is bytes else np.asarray(x, dtype=dtype).tobytes() for x in items]
    values = np.frombuffer(b"".join([x for x in raw if x]), dtype=dtype)
    lengths = np.fromiter((len(x) // dtype.itemsize if x else 0 for x in raw), dtype=np.int64, count=len(raw))
    validity, nulls = _validity(raw)
    child = pa.Array.from_buffers(type_.value_type, len(values), [None, pa.py_buffer(values)])
    return pa.Array.from_buffers(type_, len(raw), [validity, _offsets(lengths, "values")], null_count=nulls, children=[child])


def column(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """The column of ``type_`` (string, int64, float64 or a list of int32/float32)."""
    if pa.types.is_string(type_):
        return string_array(values)
    if pa.types.is_list(type_):
        return list_array(values, type_)
    if pa.types.is_int64(type_) or pa.types.is_float64(type_):
        return number_array(values, type_)
    raise TypeError(f"no buffer builder for Arrow type {type_}")
