"""One command-line for every recipe: ``tracerl demo`` and each ``examples/*/train.py``.

Every default comes from the recipe's :class:`LoopConfig`; the run shows a progress bar
(one line per phase when the output is not a terminal) and ends with a summary table.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tracerl.pipeline.options import CREDITS
from tracerl.orchestration.loop.config import SERVERS
from tracerl.orchestration.loop.recipe import AgentRecipe
from tracerl.trainer.serving.vllm_process import VllmOptions
from tracerl.trainer.training.options import TrainingOverrides, with_training_options

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
        credit: str = typer.Option(d.credit, "--credit", help=f"How an episode's reward reaches its calls: {' or '.join(CREDITS)}."),
        gamma: float = typer.Option(d.gamma, "--gamma", min=0.0, max=1.0, help="Discount of --credit discounted."),
        air: bool = typer.Option(d.air, "--air/--no-air", help="Automatic intermediate rewards from tool errors and other system signals."),
        agents: Optional[str] = typer.Option(d.agents, "--agents", help="Train only these agents' calls (comma-separated names; '' trains every call)."),
        policy: list[str] = typer.Option(
            [f"{name}={','.join(agents)}" for name, agents in d.policies.items()], "--policy",
            help="NAME=AGENT[,AGENT...]: a policy of its own for these agents, a LoRA adapter the agents call by NAME (repeatable; needs --lora-rank and --server vllm).",
        ),
        tool_call_parser: Optional[str] = typer.Option(
            d.tool_call_parser, "--tool-call-parser", help="With --server vllm: vLLM's tool-call parser for agents that send tools (hermes, llama3_json, ...).",
        ),
        server: str = typer.Option(
            d.server, "--server",
            help=f"What serves the policy: {' or '.join(SERVERS)} (`vllm serve` from TRACERL_VLLM_PYTHON's venv, reloaded from disk each round).",
        ),
        replay: Optional[bool] = typer.Option(
            d.replay, "--replay/--no-replay",
            help="Mix supervised replay into training (default: the recipe's format turns with its tiny model; none with --model, where --replay replays the policy's own best-rewarded outputs).",
        ),
        concurrency: int = typer.Option(d.concurrency, "--concurrency", min=1, help="Episodes the agent runs at once (1: exactly reproducible)."),
        max_tokens: Optional[int] = typer.Option(d.max_tokens, "--max-tokens", min=1, help="max_tokens of each agent call (default: the recipe's, sized for the tiny model)."),
        agent_args: Optional[str] = typer.Option(
            " ".join(d.agent_args) or None, "--agent-args",
            help="More arguments of the agent program, quoted as one (e.g. --agent-args=--reflect-on-tool-use for calc).",
        ),
        judge_url: Optional[str] = typer.Option(
            d.judge_url, "--judge-url",
            help="Train on a judge's scores instead of the agent's own rewards: the OpenAI-compatible URL of the judge (see `tracerl pipeline judge`).",
        ),
        shuffle_rewards: bool = typer.Option(
            d.shuffle_rewards, "--shuffle-rewards",
            help="The control of a learning claim: each round's training rewards permuted among its episodes (same loop, no signal).",
        ),
        judge_model: str = typer.Option(d.judge_model, "--judge-model", help="With --judge-url: the judge's model name."),
        judge_rubric: Optional[Path] = typer.Option(d.judge_rubric, "--judge-rubric", exists=True, help="With --judge-url: the rubric, a text file."),
        keep_checkpoints: int = typer.Option(d.keep_checkpoints, "--keep-checkpoints", min=1, help="Newest checkpoints kept on disk."),
        vllm_dtype: Optional[str] = typer.Option(None, "--vllm-dtype", help="With --server vllm: its --dtype (default: auto on a GPU, float32 on CPU)."),
        enforce_eager: Optional[bool] = typer.Option(None, "--enforce-eager/--cuda-graphs", help="With --server vllm: eager mode (default: CUDA graphs on a GPU, eager on CPU)."),
        gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization", min=0.05, max=1.0, help="With --server vllm: its share of the GPU (leave room for training on one GPU)."),
        max_model_len: Optional[int] = typer.Option(None, "--max-model-len", min=1, help="With --server vllm: its context length."),
        training: TrainingOverrides = TrainingOverrides(),
    ) -> None:
        from tracerl.orchestration.loop.loop import LoopSetupError, run_loop
        from tracerl.pipeline.options import parse_policies
        from tracerl.pipeline.source import PipelineInputError

        if server not in SERVERS:
            raise typer.BadParameter(f"{server!r} is not one of {', '.join(SERVERS)}", param_hint="--server")
        if credit not in CREDITS:
            raise typer.BadParameter(f"{credit!r} is not one of {', '.join(CREDITS)}", param_hint="--credit")
        try:
            policies = parse_policies(policy)
        except PipelineInputError as exc:
            raise typer.BadParameter(str(exc), param_hint="--policy") from None
        if policies and agents == d.agents:  # the recipe's --agents default selects for one policy; --policy names its own
            agents = None
        backend, train_config, openrlhf = training.apply(d.backend, replace(d.train, seed=seed), d.openrlhf)
        cfg = replace(
            d, out=out, rounds=rounds, tasks_per_round=tasks_per_round, group_size=group_size, eval_tasks=eval_tasks,
            seed=seed, model=model, data=data, credit=credit, gamma=gamma, air=air, agents=agents, policies=policies, server=server, tool_call_parser=tool_call_parser,
            replay=replay, concurrency=concurrency, max_tokens=max_tokens, judge_url=judge_url, shuffle_rewards=shuffle_rewards, judge_model=judge_model, judge_rubric=judge_rubric, agent_args=tuple(shlex.split(agent_args or "")), keep_checkpoints=keep_checkpoints,
            backend=backend, train=train_config, openrlhf=openrlhf,
            vllm=VllmOptions(dtype=vllm_dtype, enforce_eager=enforce_eager, gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len),
        )
        if model:
            from tracerl.trainer.training.model_folder import ModelFolderError, inspect_policy_folder

            if Path(model).exists():  # a hub id is resolved by the libraries themselves
                try:
                    inspect_policy_folder(model)
                except ModelFolderError as exc:
                    raise typer.BadParameter(str(exc), param_hint="--model") from None
        columns = (TextColumn("[bold]round {task.completed}/{task.total}"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        with Progress(*columns, console=console) as bar:
            task = bar.add_task("starting", total=rounds + 1)

            def on_phase(rnd: int, text: str) -> None:
                bar.update(task, completed=rnd, description=text)
                if not console.is_terminal or text.startswith("warning:"):  # logs get one line per phase instead of a bar
                    console.print(f"round {rnd}: {text}")

            try:
                rows = run_loop(recipe, cfg, on_phase=on_phase)
            except LoopSetupError as exc:
                raise typer.BadParameter(str(exc)) from None
            bar.update(task, completed=rounds + 1, description="done")

        def fmt(value: Optional[float]) -> str:
            return "-" if value is None else f"{value:.3f}"

        for row in rows:
            versions = "  ".join(f"{name} v{p['policy_version']} {p.get('status', '')}".rstrip() for name, p in row.get("policies", {}).items())
            console.print(
                f"round {row['round']}: train {fmt(row['train_mean_reward'])}  held-out {fmt(row['eval_mean_reward'])}  "
                f"transitions {row['transitions']}  ({row['seconds']} s)" + (f"  {versions}" if versions else "")
            )
        console.print(f"metrics: {out / 'metrics.jsonl'}   reward curve: {out / 'reward_curve.png'}")

    command = with_training_options(command)
    command.__doc__ = f"Train {recipe.title}: agent -> spans -> dataset -> training -> refreshed endpoint, round after round."
    return command


def run_recipe_cli(recipe: AgentRecipe) -> None:
    """Entry point of an example's ``train.py``: its recipe's loop as a one-command program."""
    typer.run(loop_command(recipe))
