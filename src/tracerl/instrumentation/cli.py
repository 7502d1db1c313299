"""Top-level `tracerl` commands of the instrumentation part: ``run`` and ``gateway``."""

from __future__ import annotations

import os
from typing import Optional

import typer

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def run(
    ctx: typer.Context,
    data_dir: Optional[str] = typer.Option(None, "--data-dir", "-d", help="Where spans land (default $TRACERL_DATA_DIR or ./tracerl-data)."),
    otlp_endpoint: Optional[str] = typer.Option(None, "--otlp", help="Send spans over OTLP/HTTP to this URL (e.g. a `tracerl collector`) instead of Parquet."),
    task_id: Optional[str] = typer.Option(None, "--task-id", help="Make the whole run one episode of this task."),
    split: Optional[str] = typer.Option(None, "--split", help="train, val or test (with --task-id)."),
    episode_id: Optional[str] = typer.Option(None, "--episode-id", help="Episode id for the whole run (default: random, with --task-id)."),
    content: Optional[bool] = typer.Option(None, "--content/--no-content", help="Record prompts and completions (default: yes)."),
    http_spans: bool = typer.Option(True, "--http-spans/--no-http-spans", help="Make HTTP client spans (each captured LLM call's transport; needed to name LLM requests no hook recognised)."),
) -> None:
    """Run CMD with capture on, no code change: `tracerl run -- python agent.py`."""
    from tracerl.instrumentation.run import capture_env, exec_captured

    command = list(ctx.args)
    if not command:
        raise typer.BadParameter("give the command to run after `--`, e.g. `tracerl run -- python agent.py`")
    env = capture_env(
        os.environ,
        data_dir=data_dir,
        otlp_endpoint=otlp_endpoint,
        task_id=task_id,
        split=split,
        episode_id=episode_id,
        capture_content=content,
        http_spans=http_spans,
    )
    try:
        exec_captured(command, env)
    except FileNotFoundError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(127) from exc


def gateway(
    upstream: str = typer.Option(..., "--upstream", "-u", help="OpenAI-compatible server to forward to, e.g. http://127.0.0.1:8000 (vLLM, `tracerl serve`)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8080, "--port", "-p", help="Port to listen on."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", "-d", help="Where spans land (default $TRACERL_DATA_DIR or ./tracerl-data)."),
) -> None:
    """Record every LLM call of agents that cannot be instrumented: point them at this proxy."""
    from tracerl.core.extras import missing_message

    if message := missing_message("collector", "`tracerl gateway`"):
        typer.secho(f"tracerl: {message}", fg="red", err=True)
        raise typer.Exit(2)
    import httpx
    import uvicorn

    from tracerl.instrumentation.gateway import create_gateway_app
    from tracerl.instrumentation.setup import instrument

    url = httpx.URL(upstream)
    if url.scheme not in ("http", "https") or not url.host:
        raise typer.BadParameter(f"{upstream!r} is not an http(s) URL", param_hint="--upstream")
    instrument(data_dir=data_dir, service_name="tracerl-gateway")
    typer.echo(f"tracerl gateway: http://{host}:{port}/v1 -> {upstream} (Ctrl-C to stop)", err=True)
    uvicorn.run(create_gateway_app(upstream), host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root `tracerl` app."""
    app.command("run", context_settings=CONTEXT)(run)
    app.command("gateway")(gateway)
