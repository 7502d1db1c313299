"""Lossless encodings of token-id and log-prob arrays on span attributes.

OTel int arrays are readable by every OTel tool but slow to encode over OTLP (every
element becomes its own protobuf ``AnyValue``), so spans may instead carry a packed
string: ``"tokpack:i4:" + base64(little-endian int32)`` (``f4`` for float32 log-probs).
Readers accept both forms; :func:`decode` is the one place that knows them.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np

PACKED_PREFIX = "tokpack:"
_DTYPES = {"i4": np.dtype("<i4"), "f4": np.dtype("<f4")}


class TokenEncodingError(ValueError):
    """A token attribute is neither an array nor a valid packed string."""


def pack_ids(ids: Sequence[int]) -> str:
    return PACKED_PREFIX + "i4:" + base64.b64encode(np.asarray(ids, dtype="<i4").tobytes()).decode()


def pack_floats(values: Sequence[float]) -> str:
    return PACKED_PREFIX + "f4:" + base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


def decode(value: object) -> list | None:
    """Return the array an attribute value stands for (``None`` stays ``None``)."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.startswith(PACKED_PREFIX):
            raise TokenEncodingError(f"expected an array or a '{PACKED_PREFIX}' string, got {value[:40]!r}")
        try:
            _, code, payload = value.split(":", 2)
            dtype = _DTYPES[code]
            return np.frombuffer(base64.b64decode(payload, validate=True), dtype=dtype).tolist()
        except (KeyError, ValueError) as exc:
            raise TokenEncodingError(f"corrupt packed token array {value[:40]!r}: {exc}") from exc
    if isinstance(value, (list, tuple, np.ndarray)):
        return list(value)
    raise TokenEncodingError(f"expected an array of numbers, got {type(value).__name__}")
