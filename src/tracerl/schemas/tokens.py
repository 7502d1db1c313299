"""Lossless encodings of token-id and log-prob arrays on span attributes.

OTel int arrays are readable by every OTel tool but slow to encode over OTLP (every
element becomes its own protobuf ``AnyValue``), so spans may instead carry a packed
string: ``"tokpack:i4:" + base64(little-endian int32)`` (``f4`` for float32 log-probs).
Readers accept both forms; :func:`decode` is the one place that knows them.
"""

from __future__ import annotations

import array
import base64
import sys
from collections.abc import Sequence

import numpy as np

PACKED_PREFIX = "tokpack:"
_DTYPES = {"i4": np.dtype("<i4"), "f4": np.dtype("<f4")}


class TokenEncodingError(ValueError):
    """A token attribute is neither an array nor a valid packed string."""


def pack_ids(ids: Sequence[int]) -> str:
    """The packed form of ``ids``; ``TypeError``/``OverflowError`` unless each is an int32.

    Through the array module, which checks and packs in one pass: for the few hundred
    Python ints of an LLM call that is several times cheaper than numpy's checks.
    """
    return _pack("i4", array.array("i", ids))


def pack_floats(values: Sequence[float]) -> str:
    """The packed form of ``values`` (float32); ``TypeError`` unless each is a number."""
    return _pack("f4", array.array("f", values))


class PackedArray(str):
    """A packed string that still holds the array it was packed from.

    The OTel SDK keeps a ``str`` attribute value as it is, so a reader in the same process (the
    Parquet exporter) takes :attr:`values` instead of decoding the base64 the string carries for
    the wire (an OTLP exporter sends the string). A copy sliced or rebuilt as a plain ``str``
    (a length limit, a round trip through bytes) is decoded like any packed string.
    """

    values: np.ndarray


def _pack(code: str, values: array.array) -> str:
    if sys.byteorder == "big":
        values.byteswap()
    packed = PackedArray(PACKED_PREFIX + code + ":" + base64.b64encode(values).decode())
    packed.values = np.frombuffer(values, dtype=_DTYPES[code])
    return packed


assert array.array("i").itemsize == 4 and array.array("f").itemsize == 4, "tokpack needs 4-byte C int and float"


def _unpack(value: str) -> np.ndarray:
    if isinstance(value, PackedArray):
        return value.values
    if not value.startswith(PACKED_PREFIX):
        raise TokenEncodingError(f"expected an array or a '{PACKED_PREFIX}' string, got {value[:40]!r}")
    try:
        _, code, payload = value.split(":", 2)
        return np.frombuffer(base64.b64decode(payload, validate=True), dtype=_DTYPES[code])
    except (KeyError, ValueError) as exc:
        raise TokenEncodingError(f"corrupt packed token array {value[:40]!r}: {exc}") from exc


def decode(value: object) -> list | np.ndarray | None:
    """Return the array an attribute value stands for (``None`` stays ``None``)."""
    if value is None:
        return None
    if isinstance(value, str):
        return _unpack(value).tolist()
    if isinstance(value, np.ndarray):
        return value  # already an array (e.g. from decode_array): no per-element copy
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TokenEncodingError(f"expected an array of numbers, got {type(value).__name__}")


def decode_array(value: object, dtype: str) -> np.ndarray | None:
    """Strict, vectorised :func:`decode` for receivers of untrusted data.

    Returns a numpy array of ``dtype`` (``"i4"`` token ids, ``"f4"`` log-probs), the
    types of the spans table's columns, and raises :class:`TokenEncodingError` for
    anything that would not store exactly: a packed string of the other element type,
    non-integral or out-of-range ids, non-numeric elements. Arrow builds a list column
    from numpy arrays far faster than from Python lists.
    """
    if value is None:
        return None
    want = _DTYPES[dtype]
    if isinstance(value, str):
        array = _unpack(value)
        if array.dtype != want:
            raise TokenEncodingError(f"expected a packed '{dtype}' array, got {value[:40]!r}")
        return array
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise TokenEncodingError(f"expected an array of numbers, got {type(value).__name__}")
    try:
        array = np.asarray(value)
    except (ValueError, OverflowError) as exc:  # ragged nesting, ints beyond int64
        raise TokenEncodingError(f"expected a flat array of numbers: {exc}") from exc
    if array.size == 0:
        return np.empty(0, dtype=want)
    if array.ndim != 1 or array.dtype.kind not in ("i", "u", "f") or (want.kind == "i" and array.dtype.kind == "f"):
        raise TokenEncodingError(f"expected a flat array of {'integers' if want.kind == 'i' else 'numbers'}")
    if want.kind == "i" and (array.min() < np.iinfo(want).min or array.max() > np.iinfo(want).max):
        raise TokenEncodingError("token id out of int32 range")
    if want.kind == "f" and np.any(np.isfinite(array) & (np.abs(array) > np.finfo(want).max)):
        raise TokenEncodingError("log-prob out of float32 range")  # would be stored as infinity
    with np.errstate(invalid="ignore"):  # a signalling NaN from the wire becomes a quiet NaN, not a warning
        return array.astype(want, copy=False)
