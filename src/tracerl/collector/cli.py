"""`tracerl collector` commands."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer

from tracerl.collector.compaction import (
    TABLES,
    CompactionBusy,
    CompactionSettings,
    PartitionResult,
    PeriodicCompaction,
    check_data_folder,
)
from tracerl.collector.compaction import compact as compact_pass
from tracerl.collector.service import MiB, CollectorConfig, replay_unused_wals
from tracerl.core.commands import command_group
from tracerl.schemas import environment as E

app = command_group(no_args_is_help=True)


@app.command()
def serve(
    out: str = typer.Option(..., "--out", help="Data dir (local folder or s3://bucket/prefix); spans go to OUT/spans, logs to OUT/logs."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for all interfaces)."),
    http_port: int = typer.Option(4318, help="OTLP/HTTP port (0: any free port)."),
    grpc_port: int = typer.Option(4317, help="OTLP/gRPC port (0: any free port, -1: no gRPC)."),
    wal_dir: Optional[Path] = typer.Option(None, help="Write-ahead log folder (default OUT/.collector-wal; required for object-store OUT). One per collector."),
    instance_id: Optional[str] = typer.Option(None, help="Name in Parquet file names, unique per collector (default: made once, kept in the WAL folder)."),
    auth_token: Optional[str] = typer.Option(None, envvar=E.COLLECTOR_TOKEN_ENV, help="Require 'Authorization: Bearer <token>'."),
    tls_cert: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="PEM certificate: serve HTTPS and gRPC over TLS."),
    tls_key: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="PEM private key for --tls-cert."),
    flush_interval: float = typer.Option(5.0, help="Seconds between Parquet commits (at most)."),
    flush_mb: int = typer.Option(64, help="Buffered MiB that trigger a Parquet commit early."),
    max_backlog_mb: int = typer.Option(512, help="MiB not yet in Parquet before clients get 503 + Retry-After."),
    max_inflight_mb: int = typer.Option(256, help="MiB of requests in progress before clients get 429 + Retry-After."),
    max_body_mb: int = typer.Option(64, help="Largest request after decompression; larger ones get 413."),
    workers: int = typer.Option(1, min=1, help="Collector processes sharing the ports (one core each; each has its own WAL)."),
    log_level: str = typer.Option("info", help="Log level (span content is never logged)."),
    compact_every: float = typer.Option(0.0, help="Seconds between compaction passes run by this collector (0: none); see `collector compact`."),
) -> None:
    """Receive OTLP (HTTP protobuf/JSON on /v1/traces and /v1/logs, and gRPC); write durable Parquet."""
    from tracerl.collector.server import CollectorServer, Endpoints
    from tracerl.collector.workers import serve_workers

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = CollectorConfig(
            out=out,
            wal_dir=wal_dir,
            instance_id=instance_id,
            flush_bytes=flush_mb * MiB,
            flush_interval_s=flush_interval,
            max_backlog_bytes=max_backlog_mb * MiB,
            max_inflight_bytes=max_inflight_mb * MiB,
            max_body_bytes=max_body_mb * MiB,
            auth_token=auth_token,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    endpoints = Endpoints(host, http_port, None if grpc_port < 0 else grpc_port, tls_cert, tls_key)
    scheme = "https" if tls_cert else "http"

    def ready(http: int, grpc: int | None) -> None:  # tests and scripts read this line
        typer.echo(f"tracerl collector: OTLP/HTTP {scheme}://{host}:{http} OTLP/gRPC {grpc if grpc is not None else 'off'} "
                   f"workers={workers} out={out}")

    compaction = PeriodicCompaction(out, CompactionSettings(), compact_every) if compact_every > 0 else nullcontext()
    try:
        with compaction:
            if workers > 1:
                serve_workers(config, endpoints, workers, ready)
            else:
                replay_unused_wals(config, workers)  # e.g. of worker 1 when the last run had --workers 2
                server = CollectorServer(config, endpoints)
                server.serve(on_ready=lambda: ready(server.http_port, server.grpc_port))
    except (ValueError, RuntimeError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


@app.command()
def compact(
    out: str = typer.Argument(..., help="Data dir (local folder or s3://bucket/prefix) a collector or exporters write."),
    table: list[str] = typer.Option(list(TABLES), "--table", metavar="<str>", help="Table folder under OUT to compact (repeatable)."),
    target_mb: int = typer.Option(32, min=1, help="Size of the files written; files over half of it are left as they are."),
    settle: float = typer.Option(900.0, min=0, help="Seconds after its hour ends before a partition is compacted."),
    grace: float = typer.Option(900.0, min=0, help="Seconds the replaced files stay for readers that listed them before the swap."),
) -> None:
    """Rewrite closed hour partitions' small files into few large ones, atomically (one pass).

    The pipeline reads the old files or the new, never both; a killed pass loses and duplicates nothing, and the next pass finishes or undoes it. Run it from cron, or let `collector serve --compact-every` run it."""
    from rich.progress import Progress

    settings = CompactionSettings(target_bytes=target_mb * MiB, settle_s=settle, grace_s=grace)
    results: list[PartitionResult] = []
    with Progress(transient=True) as progress:
        task = progress.add_task("compacting", total=None)

        def show(result: PartitionResult) -> None:
            results.append(result)
            progress.update(task, description=f"{result.table}/{result.partition}", advance=1)
            progress.console.print(result.describe(), markup=False, highlight=False, soft_wrap=True)

        try:
            check_data_folder(out, tuple(table))
            compact_pass(out, settings, tables=tuple(table), on_partition=show)
        except (CompactionBusy, OSError, RuntimeError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
    failed = [r for r in results if r.failed]
    left_alone = sum(len(r.left_alone) for r in results)
    typer.echo(f"compacted {sum(r.files_in for r in results)} files into {sum(r.files_out for r in results)} "
               f"({sum(r.rows for r in results)} rows); deleted {sum(r.inputs_deleted for r in results)} replaced files, "
               f"cleaned {sum(len(r.cleaned) for r in results)} left by killed passes, left {left_alone} alone"
               + (f"; {len(failed)} partitions FAILED (named above): fix what they name and run again" if failed else ""))
    if failed:
        raise typer.Exit(1)


def main() -> None:
    """Console-script entry point (`collector ...` equals `tracerl collector ...`)."""
    app()


def register(root: typer.Typer) -> None:
    """Add `tracerl collector` to the root CLI."""
    root.add_typer(app, name="collector", help="OTLP receiver writing durable Parquet.")
