"""Fuzzing: malformed payloads never crash the server, never get a 5xx, and never disturb
a well-behaved client exporting at the same time."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tracerl.collector.server import CollectorServer, Endpoints
from tracerl.collector.service import CollectorConfig
from tracerl_testing.loadgen import encode_batches, make_spans

# The bystander exporter thread draws from `random` while hypothesis generates examples.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")

VALID = encode_batches(make_spans(8, llm_every=2, seed=21))[0]
OK_STATUSES = {200, 400, 413, 415}


class Bystander:
    """A real exporter sending a small batch every 50 ms from its own thread.

    What goes wrong in that thread (a failed export, an exception, nothing sent at all)
    is raised by :meth:`stop` in the caller's thread, where pytest sees it: an ``assert``
    in the thread itself would only be printed.
    """

    def __init__(self, url: str, timeout_s: float = 10) -> None:
        self.exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=timeout_s)
        self.batches = [make_spans(5, seed=seed) for seed in range(20)]
        self.sent = 0
        self.failures: list[SpanExportResult] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bystander")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if (result := self.exporter.export(self.batches[self.sent % len(self.batches)])) is not SpanExportResult.SUCCESS:
                    self.failures.append(result)
                self.sent += 1
                self._stop.wait(0.05)
        except BaseException as exc:  # handed to stop(), in the test's thread
            self.error = exc

    def start(self) -> Bystander:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise AssertionError(f"the bystander exporter raised after {self.sent} exports") from self.error
        assert self.sent > 0, "the bystander exporter sent nothing"
        assert not self.failures, f"{len(self.failures)} of the bystander's {self.sent} exports failed"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A collector that a well-behaved exporter keeps using while the tests fuzz it; the
    module's last teardown fails if any of that exporter's exports failed."""
    out = tmp_path_factory.mktemp("fuzz") / "data"
    with CollectorServer(CollectorConfig(out=str(out), max_body_bytes=1 << 20), Endpoints(http_port=0, grpc_port=None)) as srv:
        bystander = Bystander(srv.http_url()).start()
        yield srv
        bystander.stop()


def test_the_bystander_reports_what_went_wrong_in_its_thread():
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        bystander = Bystander(f"http://127.0.0.1:{closed.getsockname()[1]}", timeout_s=0.5).start()
        while not bystander.sent:
            time.sleep(0.01)
        with pytest.raises(AssertionError, match=r"exports failed"):
            bystander.stop()


def _post(server: CollectorServer, path: str, body: bytes, content_type: str, encoding: str | None = None) -> httpx.Response:
    headers = {"content-type": content_type} | ({"content-encoding": encoding} if encoding else {})
    return httpx.post(f"{server.http_url()}{path}", content=body, headers=headers, timeout=30)


mutations = st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=8)

fuzz = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@fuzz
@given(mutations=mutations, cut=st.integers(0, len(VALID)), path=st.sampled_from(["/v1/traces", "/v1/logs"]))
def test_mutated_protobuf(server, mutations, cut, path):
    body = bytearray(VALID[:cut])
    for index, value in mutations:
        if index < len(body):
            body[index] = value
    assert _post(server, path, bytes(body), "application/x-protobuf").status_code in OK_STATUSES


@fuzz
@given(body=st.binary(max_size=2048), encoding=st.sampled_from([None, "gzip", "deflate", "zstd"]))
def test_random_bytes(server, body, encoding):
    assert _post(server, "/v1/traces", body, "application/x-protobuf", encoding).status_code in OK_STATUSES


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
any_value = st.recursive(
    st.fixed_dictionaries({"stringValue": st.text(max_size=30)})
    | st.fixed_dictionaries({"intValue": st.integers(-(2**63), 2**63 - 1).map(str)})
    | st.fixed_dictionaries({"doubleValue": st.floats()})
    | st.fixed_dictionaries({"bytesValue": st.sampled_from(["", "AAEC", "!!"])})
    | st.just({"stringValue": "tokpack:i4:AAAAAA"}),
    lambda inner: st.fixed_dictionaries({"arrayValue": st.fixed_dictionaries({"values": st.lists(inner, max_size=4)})}),
    max_leaves=10,
)
otlp_span = st.fixed_dictionaries(
    {
        "traceId": st.sampled_from(["5b8efff798038103d269b633813fc60c", "", "00", "zz"]),
        "spanId": st.sampled_from(["eee19b7ec3c1b174", "0000000000000000", "abc"]),
        "name": st.text(max_size=20),
        "startTimeUnixNano": st.integers(0, 2**64 - 1).map(str),
        "attributes": st.lists(
            st.fixed_dictionaries({"key": st.sampled_from(["a", "tracerl.llm.prompt_token_ids",
                                                           "tracerl.llm.completion_logprobs", "tracerl.policy.version"]),
                                   "value": any_value}),
            max_size=4,
        ),
    }
)


@fuzz
@given(document=json_values)
def test_random_json(server, document):
    assert _post(server, "/v1/traces", json.dumps(document).encode(), "application/json").status_code in OK_STATUSES


@fuzz
@given(spans=st.lists(otlp_span, max_size=5))
def test_structurally_plausible_otlp_json(server, spans):
    document = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    reply = _post(server, "/v1/traces", json.dumps(document).encode(), "application/json")
    assert reply.status_code in OK_STATUSES
    if reply.status_code == 200 and reply.json():
        assert int(reply.json()["partialSuccess"]["rejectedSpans"]) >= 1
