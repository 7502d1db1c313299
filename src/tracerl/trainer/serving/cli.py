"""``tracerl serve``: the built-in policy server in the foreground."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tracerl.trainer.serving.config import EngineConfig

console = Console(stderr=True)


def serve(
    model: Optional[Path] = typer.Option(None, "--model", help="Hugging Face model dir (default: the tiny local model, built on first use)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind; 0.0.0.0 exposes it to the network."),
    port: int = typer.Option(8000, "--port"),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="Name in /v1/models (default: the model dir's name)."),
    max_batch_size: int = typer.Option(EngineConfig.max_batch_size, "--max-batch-size", min=1, help="Most sequences decoded together."),
    threads: int = typer.Option(EngineConfig.num_threads, "--threads", min=0, help="Torch threads of the decoding loop (0: torch's default)."),
    max_model_len: Optional[int] = typer.Option(
        EngineConfig.max_model_len,
        "--max-model-len",
        min=1,
        help="Longest prompt + completion served (default: the model's max_position_embeddings, which it may not exceed).",
    ),
    policy_version: int = typer.Option(
        EngineConfig.policy_version, "--policy-version", min=0, help="Version the served weights are (e.g. when restarting on round k's checkpoint)."
    ),
) -> None:
    """Serve a policy over the OpenAI API (chat, completions, responses) and Anthropic's (messages) with token ids, log-probs and policy versions."""
    import uvicorn

    from tracerl.trainer.serving.app import create_app
    from tracerl.trainer.serving.engine import ContextLengthError

    if model is not None and not (model / "config.json").is_file():
        raise typer.BadParameter(f"{model} is not a Hugging Face model dir (no config.json)", param_hint="--model")
    config = EngineConfig(
        max_batch_size=max_batch_size, policy_version=policy_version, num_threads=threads or None, max_model_len=max_model_len
    )
    try:
        app = create_app(model, served_model_name=served_model_name, engine_config=config)
    except ContextLengthError as exc:
        raise typer.BadParameter(str(exc), param_hint="--max-model-len") from None
    engine = app.state.engine
    console.print(
        f"serving {engine.model_path} at http://{host}:{port}/v1 "
        f"(policy version {engine.policy_version}, max model len {engine.max_context})"
    )
    uvicorn.run(app, host=host, port=port, log_level="info")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
