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
) -> None:
    """Run CMD with capture on, no code change: `tracerl run -- python agent.py`."""
    from tracerl.instrumentation.run import capture_env, run_captured

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
    )
    try:
        code = run_captured(command, env)
    except FileNotFoundError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(127) from exc
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root `tracerl` app."""
    app.command("run", context_settings=CONTEXT)(run)
