"""OTLP/gRPC front end: ``TraceService/Export`` and ``LogsService/Export`` of opentelemetry-proto.

The methods are registered with raw-bytes handlers (no request deserializer): the collector
parses the body itself, like the HTTP front end, and hands the same bytes to the column
builder (which reads them with the C wire decoder) and to the WAL, instead of having gRPC
parse them and then re-serializing the message for the WAL.

Overload is answered with ``RESOURCE_EXHAUSTED`` plus a ``RetryInfo`` detail (the OTLP
specification's signal that retrying later will work; exporters honour the delay),
bad data with ``INVALID_ARGUMENT``, a missing bearer token with ``UNAUTHENTICATED``.
Oversize messages are refused by gRPC itself (``max_receive_message_length``).
"""

from __future__ import annotations

import logging
from concurrent import futures

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tracerl.collector import otlp
from tracerl.collector.service import LOGS, TRACES, Collector, Signal
from tracerl.collector.sink import Overloaded
from tracerl.schemas import attributes as A

log = logging.getLogger("tracerl.collector")

_SERVICES = (
    (trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name, TRACES),
    (logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name, LOGS),
)


def _export(collector: Collector, signal: Signal, payload: bytes, context: grpc.ServicerContext) -> Message:
    if not collector.authorized(dict(context.invocation_metadata()).get(A.AUTHORIZATION_HEADER)):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (metadata 'authorization: Bearer <token>')")
    reserved = 0
    try:
        collector.admission.acquire(len(payload))
        reserved = len(payload)
        durable, response = collector.export(signal, payload)  # the received bytes go to the WAL
        durable.result()
        return response
    except otlp.BadPayload as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except Overloaded as exc:
        retry = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=exc.retry_after_s))
        status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=str(exc))
        status.details.add().Pack(retry)
        context.set_trailing_metadata(((A.GRPC_STATUS_DETAILS_KEY, status.SerializeToString()),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    except Exception as exc:  # a bug: say so without the data (messages may quote span content)
        log.error("internal error handling a %s request: %s", signal.table.name, type(exc).__name__)
        context.abort(grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__})")
    finally:
        collector.admission.release(reserved)


def _handler(collector: Collector, service: str, signal: Signal) -> grpc.GenericRpcHandler:
    """``service``/Export taking the request's bytes as received."""

    def export(payload: bytes, context: grpc.ServicerContext) -> Message:
        return _export(collector, signal, payload, context)

    method = grpc.unary_unary_rpc_method_handler(export, response_serializer=lambda response: response.SerializeToString())
    return grpc.method_handlers_generic_handler(service, {"Export": method})


def create_server(
    collector: Collector,
    address: str,
    *,
    tls: tuple[bytes, bytes] | None = None,
    reuse_port: bool = False,
    max_workers: int = 16,
) -> tuple[grpc.Server, int]:
    """A gRPC server bound to ``address`` (not yet started) and the port it bound."""
    limit = collector.config.max_body_bytes
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="otlp-grpc"),
        # without reuse_port a second collector on the same port fails loudly instead of sharing it
        options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", int(reuse_port))],
        maximum_concurrent_rpcs=max_workers * 4,  # beyond this: RESOURCE_EXHAUSTED, not a queue
    )
    server.add_generic_rpc_handlers([_handler(collector, service, signal) for service, signal in _SERVICES])
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        key, cert = tls
        port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
    return server, port
