"""Top-level `tracerl` commands of the trainer part: serve, train, demo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(stderr=True)


def train(
    dataset: Path = typer.Option(..., "--dataset", help="Folder written by `tracerl pipeline build-dataset`."),
    model: Path = typer.Option(..., "--model", help="Hugging Face checkpoint of the current policy."),
    out: Path = typer.Option(..., "--out", help="Where to write the new checkpoint."),
    server: Optional[str] = typer.Option(None, "--server", help="Policy endpoint to refresh, e.g. http://127.0.0.1:8000/v1"),
    version: Optional[int] = typer.Option(None, "--version", help="Policy version to announce (default: the server's next)."),
    learning_rate: float = typer.Option(1e-3, "--lr"),
    epochs: int = typer.Option(2, "--epochs"),
    minibatch_size: int = typer.Option(64, "--minibatch-size"),
    clip_epsilon: float = typer.Option(0.2, "--clip"),
) -> None:
    """One clipped policy-gradient pass of the torch backend over a dataset."""
    from tracerl.trainer.training.torch_backend import EmptyDatasetError, PolicyTrainer, TrainConfig, read_dataset

    if not (model / "config.json").exists():
        raise typer.BadParameter(f"{model} is not a Hugging Face checkpoint (no config.json)", param_hint="--model")
    try:
        samples, skipped = read_dataset(dataset)
    except EmptyDatasetError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dataset") from exc
    config = TrainConfig(learning_rate=learning_rate, epochs=epochs, minibatch_size=minibatch_size, clip_epsilon=clip_epsilon)
    trainer = PolicyTrainer(model, config)
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("train", total=None)
        stats = trainer.train(samples, progress=lambda done, total: bar.update(task, completed=done, total=total))
    checkpoint = trainer.save(out)
    result = {"checkpoint": str(checkpoint), "skipped": skipped, **stats.as_dict()}
    if server:
        import httpx

        body = {"path": str(checkpoint.resolve())} | ({"version": version} if version is not None else {})
        reply = httpx.post(f"{server.rstrip('/')}/load_weights", json=body, timeout=120)
        reply.raise_for_status()
        result["policy_version"] = reply.json()["policy_version"]
    typer.echo(json.dumps(result))


def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Folder for metrics.jsonl, reward_curve.png, checkpoints."),
    rounds: int = typer.Option(8, "--rounds", help="Training rounds after the round-0 evaluation."),
    tasks_per_round: int = typer.Option(32, "--tasks-per-round"),
    group_size: int = typer.Option(4, "--group-size", help="Samples per task (the GRPO group)."),
    eval_tasks: int = typer.Option(100, "--eval-tasks"),
    seed: int = typer.Option(0, "--seed"),
    model: Optional[str] = typer.Option(None, "--model", help="Starting policy (default: a tiny model built locally)."),
    learning_rate: float = typer.Option(1e-3, "--lr"),
) -> None:
    """Run the whole loop: agent -> spans -> dataset -> training -> refreshed endpoint, round after round."""
    from tracerl.trainer.demo.loop import DemoConfig, run_demo
    from tracerl.trainer.training.torch_backend import TrainConfig

    cfg = DemoConfig(
        out=out, rounds=rounds, tasks_per_round=tasks_per_round, group_size=group_size,
        eval_tasks=eval_tasks, seed=seed, model=model, train=TrainConfig(learning_rate=learning_rate, seed=seed),
    )
    columns = (TextColumn("[bold]round {task.completed}/{task.total}"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("starting", total=rounds + 1)

        def on_phase(rnd: int, text: str) -> None:
            bar.update(task, completed=rnd, description=text)
            if not console.is_terminal:  # logs get one line per phase instead of a bar
                console.print(f"round {rnd}: {text}")

        rows = run_demo(cfg, on_phase=on_phase)
        bar.update(task, completed=rounds + 1, description="done")
    def fmt(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.3f}"

    for row in rows:
        console.print(
            f"round {row['round']}: train {fmt(row['train_mean_reward'])}  held-out {fmt(row['eval_mean_reward'])}  "
            f"transitions {row['transitions']}  ({row['seconds']} s)"
        )
    console.print(f"metrics: {out / 'metrics.jsonl'}   reward curve: {out / 'reward_curve.png'}")


def serve(
    model: Optional[Path] = typer.Option(None, "--model", help="Hugging Face model dir (default: the tiny local model, built on first use)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind; 0.0.0.0 exposes it to the network."),
    port: int = typer.Option(8000, "--port"),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="Name in /v1/models (default: the model dir's name)."),
    max_batch_size: int = typer.Option(64, "--max-batch-size", help="Most sequences decoded together."),
    threads: int = typer.Option(1, "--threads", help="Torch threads of the decoding loop (0: torch's default)."),
    policy_version: int = typer.Option(0, "--policy-version", min=0, help="Version the served weights are (e.g. when restarting on round k's checkpoint)."),
) -> None:
    """Serve a policy over the OpenAI API (chat, completions) with token ids, log-probs and policy versions."""
    import uvicorn

    from tracerl.trainer.serving.app import create_app

    if model is not None and not (model / "config.json").is_file():
        raise typer.BadParameter(f"{model} is not a Hugging Face model dir (no config.json)", param_hint="--model")
    app = create_app(
        model, served_model_name=served_model_name, max_batch_size=max_batch_size, policy_version=policy_version, num_threads=threads or None
    )
    engine = app.state.engine
    console.print(f"serving {engine.model_path} at http://{host}:{port}/v1 (policy version {engine.policy_version})")
    uvicorn.run(app, host=host, port=port, log_level="info")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root `tracerl` app."""
    app.command("serve")(serve)
    app.command("train")(train)
    app.command("demo")(demo)
