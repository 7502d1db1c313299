"""OTLP/HTTP: the real OTel exporters and raw posts in, Parquet rows out, OTLP status codes back."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from tracerl.schemas import attributes as A
from tracerl.schemas.tokens import decode
from tracerl_testing.loadgen import encode_batches, make_spans
from tracerl_testing.tables import read_table

PROTOBUF = {"content-type": "application/x-protobuf"}


@pytest.mark.parametrize("packed", [True, False], ids=["tokpack", "int-arrays"])
@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip], ids=["plain", "gzip"])
def test_exporter_spans_arrive_losslessly(start_collector, data_dir, packed, compression):
    server = start_collector()
    spans = make_spans(40, packed=packed, llm_every=2, seed=1)
    exporter = OTLPSpanExporter(endpoint=f"{server.http_url()}/v1/traces", compression=compression)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    server.collector.flush()

    rows = {r["span_id"]: r for r in read_table(data_dir).to_pylist()}
    assert len(rows) == 40
    for span in spans:
        row = rows[format(span.context.span_id, "016x")]
        assert row["trace_id"] == format(span.context.trace_id, "032x")
        assert row["name"] == span.name
        assert row["service_name"] == "loadgen-agent"
        assert row["episode_id"] == span.attributes[A.EPISODE_ID]
        if A.PROMPT_TOKEN_IDS in span.attributes:
            assert row["prompt_token_ids"] == decode(span.attributes[A.PROMPT_TOKEN_IDS])
            assert row["completion_token_ids"] == decode(span.attributes[A.COMPLETION_TOKEN_IDS])
            assert row["completion_logprobs"] == pytest.approx(decode(span.attributes[A.COMPLETION_LOGPROBS]), abs=1e-6)
            assert "tracerl.llm.prompt_token_ids" not in row["attributes"]  # stored once, typed
        else:
            assert row["prompt_token_ids"] is None


def _json_request(token_value) -> dict:
    """An OTLP/JSON body as the spec writes it: hex ids, camelCase, int64 as strings."""
    return {
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-agent"}}]},
            "scopeSpans": [{
                "scope": {"name": "manual", "version": "0.1"},
                "spans": [{
                    "traceId": "5b8efff798038103d269b633813fc60c",
                    "spanId": "eee19b7ec3c1b174",
                    "parentSpanId": "eee19b7ec3c1b173",
                    "name": "chat tiny",
                    "kind": 3,
                    "startTimeUnixNano": "1544712660000000000",
                    "endTimeUnixNano": "1544712661000000000",
                    "attributes": [
                        {"key": A.TASK_ID, "value": {"stringValue": "t-1"}},
                        {"key": A.POLICY_VERSION, "value": {"intValue": "7"}},
                        {"key": A.PROMPT_TOKEN_IDS, "value": token_value},
                        {"key": "nested", "value": {"kvlistValue": {"values": [
                            {"key": "a", "value": {"arrayValue": {"values": [{"doubleValue": 1.5}, {"boolValue": True}]}}},
                        ]}}},
                        {"key": "raw", "value": {"bytesValue": "AAEC"}},
                    ],
                    "events": [{"name": "tracerl.reward", "timeUnixNano": "1544712660500000000",
                                "attributes": [{"key": A.REWARD_VALUE, "value": {"doubleValue": 1.0}}]}],
                    "links": [{"traceId": "5b8efff798038103d269b633813fc60d", "spanId": "eee19b7ec3c1b175"}],
                    "status": {"code": 2, "message": "boom"},
                }],
            }],
        }]
    }


def test_json_post_follows_the_otlp_json_encoding(start_collector, data_dir):
    server = start_collector()
    tokens = {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}, {"intValue": "3"}]}}
    reply = httpx.post(f"{server.http_url()}/v1/traces", json=_json_request(tokens))
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.json() == {}
    server.collector.flush()

    (row,) = read_table(data_dir).to_pylist()
    assert row["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert row["span_id"] == "eee19b7ec3c1b174"
    assert row["parent_span_id"] == "eee19b7ec3c1b173"
    assert (row["kind"], row["status_code"], row["status_message"]) == ("CLIENT", "ERROR", "boom")
    assert row["start_time_unix_nano"] == 1544712660000000000
    assert (row["task_id"], row["policy_version"], row["prompt_token_ids"]) == ("t-1", 7, [1, 2, 3])
    attributes = json.loads(row["attributes"])
    assert attributes["nested"] == {"a": [1.5, True]}  # kvlist -> dict, array -> list
    assert attributes["raw"] == {"bytes_b64": "AAEC"}  # bytes stay bytes (JSON-safe in the column)
    assert json.loads(row["links"])[0]["trace_id"] == "5b8efff798038103d269b633813fc60d"
    assert json.loads(row["events"])[0]["attributes"][A.REWARD_VALUE] == 1.0
    assert (row["service_name"], row["scope_name"], row["scope_version"]) == ("json-agent", "manual", "0.1")


def test_corrupt_token_attribute_rejects_only_that_span(start_collector, data_dir):
    server = start_collector()
    good = make_spans(3, seed=2, llm_every=1)
    request = _json_request({"stringValue": "tokpack:i4:###not-base64###"})
    request["resourceSpans"][0]["scopeSpans"][0]["spans"].append(
        dict(request["resourceSpans"][0]["scopeSpans"][0]["spans"][0], spanId="eee19b7ec3c1b199",
             attributes=[{"key": A.PROMPT_TOKEN_IDS, "value": {"stringValue": "tokpack:i4:AQAAAA=="}}])
    )
    reply = httpx.post(f"{server.http_url()}/v1/traces", json=request)
    assert reply.status_code == 200
    partial = reply.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "eee19b7ec3c1b174" in partial["errorMessage"] and "corrupt packed token array" in partial["errorMessage"]

    # protobuf clients get the same answer as protobuf
    proto = encode_batches(good)[0]
    assert httpx.post(f"{server.http_url()}/v1/traces", content=proto,
                      headers={"content-type": "application/x-protobuf"}).status_code == 200
    server.collector.flush()
    rows = read_table(data_dir).to_pylist()
    assert sorted(r["span_id"] for r in rows if r["trace_id"] == "5b8efff798038103d269b633813fc60c") == ["eee19b7ec3c1b199"]
    assert len(rows) == 1 + 3


@pytest.mark.parametrize(
    ("content", "headers", "status", "says"),
    [
        (b"\xff\xff\xff", {"content-type": "application/x-protobuf"}, 400, "not a valid ExportTraceServiceRequest"),
        (b"{not json", {"content-type": "application/json"}, 400, "not valid JSON"),
        (b'[1, 2]', {"content-type": "application/json"}, 400, "must be a JSON object"),
        (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}).encode(),
         {"content-type": "application/json"}, 400, "resourceSpans[0].scopeSpans[0].spans[0].traceId is not hex"),
        (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}).encode(),
         {"content-type": "application/json"}, 400, "startTimeUnixNano"),
        (b"x", {"content-type": "text/plain"}, 415, "Content-Type must be"),
        (b"not gzip", {"content-type": "application/x-protobuf", "content-encoding": "gzip"}, 400, "not valid gzip"),
        (gzip.compress(b"\0" * 1000, mtime=0)[:-8], {"content-type": "application/x-protobuf", "content-encoding": "gzip"}, 400, "truncated"),
        (b"x", {"content-type": "application/x-protobuf", "content-encoding": "br"}, 415, "not supported"),
        (gzip.compress(b"", mtime=0) + b"trailing", {"content-type": "application/x-protobuf", "content-encoding": "gzip"},
         400, "8 bytes after the end of the gzip stream"),
        (b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", {"content-type": "application/json"},
         400, "nested too deep"),
    ],
)
def test_bad_requests_get_a_status_saying_what_is_wrong(start_collector, content, headers, status, says):
    server = start_collector()
    reply = httpx.post(f"{server.http_url()}/v1/traces", content=content, headers=headers)
    assert reply.status_code == status
    if headers["content-type"] == "application/json":
        message = reply.json()["message"]
    else:
        message = status_pb2.Status.FromString(reply.content).message
    assert says in message
    # and the server keeps working
    assert OTLPSpanExporter(endpoint=f"{server.http_url()}/v1/traces").export(make_spans(2)) is SpanExportResult.SUCCESS


def test_a_gzip_body_of_several_members_is_read_whole(start_collector, data_dir):
    """`cat a.gz b.gz` is one valid gzip stream (RFC 1952): every member's spans are stored, as `gzip -d` reads them."""
    server = start_collector()
    spans = make_spans(30, seed=3)
    [body] = encode_batches(spans)
    members = gzip.compress(body[:100]) + gzip.compress(body[100:])  # split mid-message: only the whole parses
    reply = httpx.post(f"{server.http_url()}/v1/traces", content=members,
                       headers={**PROTOBUF, "content-encoding": "gzip"})
    assert reply.status_code == 200
    server.collector.flush()
    assert read_table(data_dir).num_rows == 30


def test_oversize_bodies_get_413_even_when_compressed(start_collector):
    server = start_collector(max_body_bytes=10_000)
    url = f"{server.http_url()}/v1/traces"
    reply = httpx.post(url, content=b"\0" * 20_000, headers={"content-type": "application/x-protobuf"})
    assert reply.status_code == 413
    bomb = gzip.compress(b"\0" * 5_000_000)  # ~5 KB on the wire
    reply = httpx.post(url, content=bomb, headers={"content-type": "application/x-protobuf", "content-encoding": "gzip"})
    assert reply.status_code == 413
    assert "decompressed body exceeds" in status_pb2.Status.FromString(reply.content).message


def test_bearer_token_is_required_when_configured(start_collector):
    server = start_collector(auth_token="s3cret")
    url = f"{server.http_url()}/v1/traces"
    spans = make_spans(3)
    assert OTLPSpanExporter(endpoint=url).export(spans) is SpanExportResult.FAILURE
    reply = httpx.post(url, content=b"", headers={"content-type": "application/x-protobuf", "authorization": "Bearer nope"})
    assert reply.status_code == 401
    exporter = OTLPSpanExporter(endpoint=url, headers={"Authorization": "Bearer s3cret"})
    assert exporter.export(spans) is SpanExportResult.SUCCESS


def test_empty_request_is_fine(start_collector):
    server = start_collector()
    reply = httpx.post(f"{server.http_url()}/v1/traces", content=b"", headers={"content-type": "application/x-protobuf"})
    assert reply.status_code == 200
    assert ExportTraceServiceResponse.FromString(reply.content) == ExportTraceServiceResponse()


def test_a_value_the_table_cannot_hold_rejects_only_its_span(start_collector, data_dir):
    server = start_collector()
    request = ExportTraceServiceRequest.FromString(encode_batches(make_spans(3, seed=13))[0])
    request.resource_spans[0].scope_spans[0].spans[1].start_time_unix_nano = 2**64 - 1  # uint64 on the wire
    reply = httpx.post(f"{server.http_url()}/v1/traces", content=request.SerializeToString(), headers=PROTOBUF)
    partial = ExportTraceServiceResponse.FromString(reply.content).partial_success
    assert reply.status_code == 200 and partial.rejected_spans == 1
    assert "does not fit the spans table" in partial.error_message
    server.stop()  # replay-free shutdown commits the two good spans
    assert read_table(data_dir).num_rows == 2


def test_span_content_never_reaches_the_log(start_collector, caplog):
    server = start_collector()
    secret = "the user's private prompt"
    request = _json_request({"stringValue": "tokpack:i4:###"})
    request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] = secret
    request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append(
        {"key": "gen_ai.prompt", "value": {"stringValue": secret}})
    with caplog.at_level("DEBUG"):
        httpx.post(f"{server.http_url()}/v1/traces", json=request)
        httpx.post(f"{server.http_url()}/v1/traces", content=secret.encode(), headers=PROTOBUF)
        server.collector.flush()
    assert caplog.records, "the collector logged the rejection"
    assert secret not in caplog.text
