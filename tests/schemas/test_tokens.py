"""Token arrays survive both encodings exactly; corrupt ones are named, not guessed."""

import math
import struct
import warnings

import pytest

from tracerl.schemas.tokens import TokenEncodingError, decode, decode_array, pack_floats, pack_ids


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


def test_the_strict_decoder_keeps_what_the_columns_hold_and_names_what_they_cannot():
    assert decode_array([1, 2**31 - 1], "i4").tolist() == [1, 2**31 - 1]
    assert decode_array([-0.5, -math.inf], "f4").tolist() == [-0.5, -math.inf]
    signalling_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(decode_array([signalling_nan], "f4")[0])
    for value, dtype, says in [
        ([2**31], "i4", "out of int32 range"),
        ([1.0], "i4", "integers"),
        (["1"], "i4", "integers"),
        ([[1], [2]], "i4", "flat array"),
        ([-1e300], "f4", "out of float32 range"),
        (pack_ids([1]), "f4", "expected a packed 'f4' array"),
    ]:
        with pytest.raises(TokenEncodingError, match=says):
            decode_array(value, dtype)
