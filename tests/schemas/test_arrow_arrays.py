"""Columns built from buffers are exactly the arrays pyarrow's own conversion makes, and
writing spans never imports pandas into the writer's process."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.schemas import arrow_arrays

_INT32 = st.integers(-(2**31), 2**31 - 1)
_CASES = [
    (pa.string(), st.one_of(st.none(), st.text())),
    (pa.int64(), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
    (pa.float64(), st.one_of(st.none(), st.floats(allow_nan=False))),
    (pa.list_(pa.int32()), st.one_of(st.none(), st.lists(_INT32, max_size=6), st.lists(_INT32, max_size=6).map(lambda v: np.array(v, dtype=np.int32)))),
    (pa.list_(pa.float32()), st.one_of(st.none(), st.lists(st.floats(width=32, allow_nan=False), max_size=6))),
]


@pytest.mark.parametrize("type_, values", _CASES, ids=[str(t) for t, _ in _CASES])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_column_equals_pyarrows_own_conversion(type_, values, data):
    items = data.draw(st.lists(values, max_size=8))
    built = arrow_arrays.column(items, type_)
    built.validate(full=True)
    assert built.equals(pa.array(items, type=type_))


def test_list_items_may_come_as_their_little_endian_bytes():
    items = [np.array([1, 2], dtype="<i4").tobytes(), None, b""]
    assert arrow_arrays.list_array(items, pa.list_(pa.int32())).to_pylist() == [[1, 2], None, []]


def test_values_that_do_not_fit_are_refused_by_name():
    with pytest.raises(TypeError, match="string column"):
        arrow_arrays.string_array(["a", 5])
    with pytest.raises(OverflowError):
        arrow_arrays.number_array([2**64], pa.int64())


def test_writing_spans_to_parquet_does_not_import_pandas(tmp_path):
    script = f"""
import sys
import tracerl
provider = tracerl.instrument(data_dir={str(tmp_path)!r})
from opentelemetry import trace
trace.get_tracer("t").start_span("s", attributes={{"k": "v"}}).end()
provider.force_flush()
assert "pandas" not in sys.modules, "pyarrow's pandas shim was asked"
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.glob("spans/**/*.parquet"))
