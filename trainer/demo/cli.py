"""``tracerl demo``: the whole loop on one CPU machine, with a progress bar and a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tracerl.trainer.demo.config import DEMO_SERVERS, DemoConfig
from tracerl.trainer.training.config import TrainConfig

console = Console(stderr=True)


def demo(
    out: Path = typer.Option(DemoConfig.out, "--out", help="Folder for metrics.jsonl, reward_curve.png, checkpoints."),
    rounds: int = typer.Option(DemoConfig.rounds, "--rounds", min=0, help="Training rounds after the round-0 evaluation."),
    tasks_per_round: int = typer.Option(DemoConfig.tasks_per_round, "--tasks-per-round", min=1),
    group_size: int = typer.Option(DemoConfig.group_size, "--group-size", min=1, help="Samples per task (the GRPO group)."),
    eval_tasks: int = typer.Option(DemoConfig.eval_tasks, "--eval-tasks", min=0),
    seed: int = typer.Option(DemoConfig.seed, "--seed"),
    model: Optional[str] = typer.Option(DemoConfig.model, "--model", help="Starting policy (default: a tiny model built locally)."),
    learning_rate: float = typer.Option(TrainConfig.learning_rate, "--lr"),
    server: str = typer.Option(
        DemoConfig.server, "--server",
        help=f"What serves the policy: {' or '.join(DEMO_SERVERS)} (`vllm serve` from TRACERL_VLLM_PYTHON's venv, reloaded from disk each round).",
    ),
) -> None:
    """Run the whole loop: agent -> spans -> dataset -> training -> refreshed endpoint, round after round."""
    from tracerl.trainer.demo.loop import run_demo

    if server not in DEMO_SERVERS:
        raise typer.BadParameter(f"{server!r} is not one of {', '.join(DEMO_SERVERS)}", param_hint="--server")
    cfg = DemoConfig(
        out=out, rounds=rounds, tasks_per_round=tasks_per_round, group_size=group_size,
        eval_tasks=eval_tasks, seed=seed, model=model, server=server, train=TrainConfig(learning_rate=learning_rate, seed=seed),
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


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
