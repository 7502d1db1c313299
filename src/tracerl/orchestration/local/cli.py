"""One command-line for every recipe: ``tracerl demo`` and each ``examples/*/train.py``.

Its options are :class:`~tracerl.orchestration.local.config.LocalConfig`'s own declarations
(defaults: the recipe's) and the trainer's; the run shows a progress bar (one line per phase
when the output is not a terminal) and ends with a summary table.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tracerl.core.commands import command_group
from tracerl.core.dataclass_options import config_from_options, option_parameters
from tracerl.orchestration.local.recipe import AgentRecipe
from tracerl.trainer.training.options import pop_training_overrides, training_parameters

console = Console(stderr=True)


def local_command(recipe: AgentRecipe) -> Callable[..., None]:
    """The typer command that runs ``recipe``'s loop: one option per :class:`LocalConfig` field that declares
    one (its default the recipe's), plus the training options."""
    defaults = recipe.defaults

    def command(**options: Any) -> None:
        from tracerl.orchestration.local.run import LocalSetupError, run_folder, run_local

        training = pop_training_overrides(options)
        cfg = config_from_options(defaults, options)
        if cfg.policies and cfg.agents == defaults.agents:  # the recipe's --agents default selects for one policy; --policy names its own
            cfg = replace(cfg, agents=None)
        backend, train_config, backend_options = training.apply(defaults.backend, replace(defaults.train, seed=cfg.seed), defaults.backend_options)
        cfg = replace(cfg, backend=backend, train=train_config, backend_options=backend_options)
        if cfg.model and Path(cfg.model).exists():  # a hub id is resolved by the libraries themselves
            from tracerl.trainer.training.model_folder import ModelFolderError, inspect_policy_folder

            try:
                inspect_policy_folder(cfg.model)
            except ModelFolderError as exc:
                raise typer.BadParameter(str(exc), param_hint="--model") from None
        columns = (TextColumn("[bold]round {task.completed}/{task.total}"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        with Progress(*columns, console=console) as bar:
            task = bar.add_task("starting", total=cfg.rounds + 1)

            def on_phase(rnd: int, text: str) -> None:
                bar.update(task, completed=rnd, description=text)
                if not console.is_terminal or text.startswith("warning:"):  # logs get one line per phase instead of a bar
                    console.print(f"round {rnd}: {text}")

            try:
                rows = run_local(recipe, cfg, on_phase=on_phase)
            except LocalSetupError as exc:
                raise typer.BadParameter(str(exc)) from None
            bar.update(task, completed=cfg.rounds + 1, description="done")

        def fmt(value: Optional[float]) -> str:
            return "-" if value is None else f"{value:.3f}"

        for row in rows:
            versions = "  ".join(f"{name} v{p['policy_version']} {p.get('status', '')}".rstrip() for name, p in row.get("policies", {}).items())
            console.print(
                f"round {row['round']}: train {fmt(row['train_mean_reward'])}  held-out {fmt(row['eval_mean_reward'])}  "
                f"transitions {row['transitions']}  ({row['seconds']} s)" + (f"  {versions}" if versions else "")
            )
        out = run_folder(recipe, cfg)
        console.print(f"metrics: {out / 'metrics.jsonl'}   reward curve: {out / 'reward_curve.png'}")

    command.__signature__ = inspect.Signature([*option_parameters(defaults), *training_parameters(defaults.train)])  # type: ignore[attr-defined]
    command.__doc__ = f"Train {recipe.title}: agent -> spans -> dataset -> training -> refreshed endpoint, round after round."
    return command


def recipe_app(recipe: AgentRecipe) -> typer.Typer:
    """An example's ``train.py`` program: its recipe's loop as a one-command app, help laid out as every tracerl command's."""
    app = command_group()
    app.command()(local_command(recipe))
    return app


def run_recipe_cli(recipe: AgentRecipe) -> None:
    """Entry point of an example's ``train.py``."""
    recipe_app(recipe)()
