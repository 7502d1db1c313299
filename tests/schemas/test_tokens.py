"""Token arrays survive both encodings exactly; corrupt ones are named, not guessed."""

import math

import pytest

from tracerl.schemas.tokens import TokenEncodingError, decode, pack_floats, pack_ids


def test_packed_ids_round_trip_exactly():
    ids = [0, 1, 50256, 2**31 - 1, 7]
    assert decode(pack_ids(ids)) == ids


def test_packed_floats_round_trip_at_float32_precision():
    values = [-0.25, -12.5, 0.0, -math.inf]
    assert decode(pack_floats(values)) == values


def test_plain_arrays_pass_through():
    assert decode((3, 4, 5)) == [3, 4, 5]
    assert decode(None) is None


@pytest.mark.parametrize("bad", ["hello", "tokpack:i8:AAAA", "tokpack:i4:%%%"])
def test_corrupt_values_raise_a_named_error(bad):
    with pytest.raises(TokenEncodingError):
        decode(bad)
