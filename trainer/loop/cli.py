"""One command-line for every recipe: ``tracerl demo`` and each ``examples/*/train.py``.

Every default comes from the recipe's :class:`LoopConfig`; the run shows a progress bar
(one line per phase when the output is not a terminal) and ends with a summary table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tracerl.pipeline.options import CREDITS
from tracerl.trainer.loop.config import SERVERS
from tracerl.trainer.loop.recipe import AgentRecipe

console = Console(stderr=True)


def loop_command(recipe: AgentRecipe) -> Callable[..., None]:
    """The typer command that runs ``recipe``'s loop, its option defaults taken from ``recipe.defaults``."""
    d = recipe.defaults

    def command(
        out: Path = typer.Option(d.out or Path("runs") / recipe.name, "--out", help="Folder for metrics.jsonl, reward_curve.png, checkpoints."),
        rounds: int = typer.Option(d.rounds, "--rounds", min=0, help="Training rounds after the round-0 evaluation."),
        tasks_per_round: int = typer.Option(d.tasks_per_round, "--tasks-per-round", min=1),
        group_size: int = typer.Option(d.group_size, "--group-size", min=1, help="Samples per task (the GRPO group)."),
        eval_tasks: int = typer.Option(d.eval_tasks, "--eval-tasks", min=0, help="Held-out tasks, run greedily every round."),
        seed: int = typer.Option(d.seed, "--seed"),
        model: Optional[str] = typer.Option(d.model, "--model", help="Starting policy (default: a tiny model built and warm-started locally)."),
        data: Optional[Path] = typer.Option(d.data, "--data", exists=True, help="The agent's public data set in its own format (default: tasks made locally)."),
        learning_rate: float = typer.Option(d.train.learning_rate, "--lr", min=0.0, help="0 runs the same loop without learning (a control)."),
        credit: str = typer.Option(d.credit, "--credit", help=f"How an episode's reward reaches its calls: {' or '.join(CREDITS)}."),
        gamma: float = typer.Option(d.gamma, "--gamma", min=0.0, max=1.0, help="Discount of --credit discounted."),
        air: bool = typer.Option(d.air, "--air/--no-air", help="Automatic intermediate rewards from tool errors and other system signals."),
        agents: Optional[str] = typer.Option(d.agents, "--agents", help="Train only these agents' calls (comma-separated names; '' trains every call)."),
        tool_call_parser: Optional[str] = typer.Option(
            d.tool_call_parser, "--tool-call-parser", help="With --server vllm: vLLM's tool-call parser for agents that send tools (hermes, llama3_json, ...).",
        ),
        server: str = typer.Option(
            d.server, "--server",
            help=f"What serves the policy: {' or '.join(SERVERS)} (`vllm serve` from TRACERL_VLLM_PYTHON's venv, reloaded from disk each round).",
        ),
    ) -> None:
        from tracerl.trainer.loop.loop import run_loop

        if server not in SERVERS:
            raise typer.BadParameter(f"{server!r} is not one of {', '.join(SERVERS)}", param_hint="--server")
        if credit not in CREDITS:
            raise typer.BadParameter(f"{credit!r} is not one of {', '.join(CREDITS)}", param_hint="--credit")
        cfg = replace(
            d, out=out, rounds=rounds, tasks_per_round=tasks_per_round, group_size=group_size, eval_tasks=eval_tasks,
            seed=seed, model=model, data=data, credit=credit, gamma=gamma, air=air, agents=agents, server=server, tool_call_parser=tool_call_parser,
            train=replace(d.train, learning_rate=learning_rate, seed=seed),
        )
        columns = (TextColumn("[bold]round {task.completed}/{task.total}"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        with Progress(*columns, console=console) as bar:
            task = bar.add_task("starting", total=rounds + 1)

            def on_phase(rnd: int, text: str) -> None:
                bar.update(task, completed=rnd, description=text)
                if not console.is_terminal:  # logs get one line per phase instead of a bar
                    console.print(f"round {rnd}: {text}")

            rows = run_loop(recipe, cfg, on_phase=on_phase)
            bar.update(task, completed=rounds + 1, description="done")

        def fmt(value: Optional[float]) -> str:
            return "-" if value is None else f"{value:.3f}"

        for row in rows:
            console.print(
                f"round {row['round']}: train {fmt(row['train_mean_reward'])}  held-out {fmt(row['eval_mean_reward'])}  "
                f"transitions {row['transitions']}  ({row['seconds']} s)"
            )
        console.print(f"metrics: {out / 'metrics.jsonl'}   reward curve: {out / 'reward_curve.png'}")

    command.__doc__ = f"Train {recipe.title}: agent -> spans -> dataset -> training -> refreshed endpoint, round after round."
    return command


def run_recipe_cli(recipe: AgentRecipe) -> None:
    """Entry point of an example's ``train.py``: its recipe's loop as a one-command program."""
    typer.run(loop_command(recipe))
