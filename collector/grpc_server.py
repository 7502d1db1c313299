"""OTLP/gRPC front end: the generated TraceService/LogsService servicers of opentelemetry-proto.

Overload is answered with ``RESOURCE_EXHAUSTED`` plus a ``RetryInfo`` detail (the OTLP
specification's signal that retrying later will work; exporters honour the delay),
bad data with ``INVALID_ARGUMENT``, a missing bearer token with ``UNAUTHENTICATED``.
Oversize messages are refused by gRPC itself (``max_receive_message_length``).
"""

from __future__ import annotations

import hmac
import logging
from concurrent import futures

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from tracerl.collector.service import LOGS, TRACES, Collector, Signal
from tracerl.collector.sink import Overloaded

log = logging.getLogger("tracerl.collector")


def _export(collector: Collector, signal: Signal, request: Message, context: grpc.ServicerContext) -> Message:
    token = collector.config.auth_token
    if token is not None:
        given = dict(context.invocation_metadata()).get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (metadata 'authorization')")
    payload = request.SerializeToString()  # the WAL record
    reserved = 0
    try:
        collector.admission.acquire(len(payload))
        reserved = len(payload)
        durable, response = collector.export(signal, request, payload)
        durable.result()
        return response
    except Overloaded as exc:
        retry = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=exc.retry_after_s))
        status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=str(exc))
        status.details.add().Pack(retry)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    except Exception as exc:  # a bug: say so without the data (messages may quote span content)
        log.error("internal error handling a %s request: %s", signal.table.name, type(exc).__name__)
        context.abort(grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__})")
    finally:
        collector.admission.release(reserved)


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def Export(self, request, context):  # noqa: N802 (generated name)
        return _export(self.collector, TRACES, request, context)


class LogsService(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def Export(self, request, context):  # noqa: N802 (generated name)
        return _export(self.collector, LOGS, request, context)


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
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(collector), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(LogsService(collector), server)
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        key, cert = tls
        port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
    return server, port
