"""TLS on both protocols, and object storage through a real S3-compatible server (moto) on loopback."""

from __future__ import annotations

import datetime
import ipaddress

import boto3
import grpc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tracerl.collector.service import CollectorConfig
from tracerl_testing.loadgen import make_spans
from tracerl_testing.tables import read_table


@pytest.fixture
def certificate(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_on_http_and_grpc(start_collector, data_dir, certificate, monkeypatch):
    # requests lets these variables override the exporter's certificate_file (requests#3829)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    server = start_collector(tls=certificate)
    assert server.http_url().startswith("https://")
    spans = make_spans(10, seed=11)
    http = HttpExporter(endpoint=f"{server.http_url()}/v1/traces", certificate_file=str(certificate[0]))
    assert http.export(spans[:5]) is SpanExportResult.SUCCESS
    credentials = grpc.ssl_channel_credentials(root_certificates=certificate[0].read_bytes())
    grpc_exporter = GrpcExporter(endpoint=f"localhost:{server.grpc_port}", credentials=credentials)
    assert grpc_exporter.export(spans[5:]) is SpanExportResult.SUCCESS
    grpc_exporter.shutdown()
    server.collector.flush()
    assert read_table(data_dir).num_rows == 10


def test_object_storage_through_pyarrow_s3(start_collector, tmp_path, s3):
    host_port = s3.removeprefix("http://")
    out = f"s3://traces/prod?endpoint_override={host_port}&scheme=http&region=us-east-1"
    server = start_collector(out=out, wal_dir=tmp_path / "wal")
    spans = make_spans(25, seed=12)
    assert HttpExporter(endpoint=f"{server.http_url()}/v1/traces").export(spans) is SpanExportResult.SUCCESS
    server.collector.flush()

    objects = boto3.client("s3", endpoint_url=s3).list_objects_v2(Bucket="traces")["Contents"]
    (key,) = [o["Key"] for o in objects if not o["Key"].endswith("/")]  # pyarrow adds folder markers
    assert key.startswith("prod/spans/date=") and key.endswith(".parquet")
    fs = pafs.S3FileSystem(endpoint_override=host_port, scheme="http", region="us-east-1")
    table = pq.read_table(f"traces/{key}", filesystem=fs)
    assert sorted(table["span_id"].to_pylist()) == sorted(format(s.context.span_id, "016x") for s in spans)


def test_object_storage_needs_a_local_wal_dir():
    with pytest.raises(ValueError, match="give a local --wal-dir"):
        CollectorConfig(out="s3://traces/prod").resolved_wal_dir()
