"""The local training loop: any agent recipe, round after round, on one machine.

Each round:

1. the recipe's agent (an ordinary program, unaware of training) runs under ``tracerl
   run`` against the policy endpoint: held-out tasks greedily, training tasks sampled
   ``group_size`` times each. Capture is switched on by environment variables only,
   exactly as for a user's agent;
2. the pipeline turns that round's spans into transitions (one per LLM call), with the
   configured credit assignment, automatic intermediate rewards and agent selection;
3. the configured backend (``--backend torch|openrlhf``, the trainer ``tracerl train``
   uses, :func:`~tracerl.trainer.training.backends.load_trainer`) takes clipped
   policy-gradient steps on them, plus a few replayed supervised samples (with the tiny
   model, the recipe's format turns, so that training one sub-agent's calls does not wear
   down another's format; with ``--model`` and ``--replay``, the policy's own best-rewarded
   outputs), and writes a checkpoint with its manifest, which :func:`tracerl.orchestration.release.release`
   makes the endpoint serve as the next policy version (with ``--lora-rank``, the adapter, which
   vLLM swaps in place) and records in the policy's registry: the path a scheduled round takes too
   (:mod:`tracerl.orchestration.round_record`). A round with nothing to train on is recorded there
   as skipped. Only the newest ``keep_checkpoints`` checkpoints keep their weights.

The endpoint is tracerl's built-in server or ``vllm serve`` (``LocalConfig.server``),
started on the starting policy for the whole run.

Round 0 evaluates the starting policy before any training. Each round's phases are timed on one
clock. Metrics go to ``OUT/metrics.jsonl`` (the row type scheduled rounds write too:
:mod:`tracerl.schemas.run_metrics`) and the reward curve to ``OUT/reward_curve.png``; with ``--report-to``, both
to the trackers named too (:mod:`tracerl.trainer.trackers`: the row at step = the round, the curve
as an image), and the run's config once.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from itertools import groupby
from pathlib import Path
from typing import NamedTuple

import duckdb
import numpy as np

from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME
from tracerl.schemas import attributes as A
from tracerl.orchestration.local.config import SERVERS, LocalConfig
from tracerl.orchestration.local.plots import plot_reward_curve
from tracerl.orchestration.local.recipe import AgentRecipe, Task
from tracerl.orchestration.local.warm_start import starting_policy, supervised_samples
from tracerl.orchestration.phases import PhaseClock
from tracerl.orchestration.release import release
from tracerl.orchestration.registry import PolicyRegistry, VersionEntry
from tracerl.orchestration.round_record import checkpoint_bytes, metrics_row, skip_row, time_fields, trained_entry
from tracerl.schemas.dataset_folder import FILES_GLOB, DatasetFolder
from tracerl.pipeline.options import check_policies
from tracerl.pipeline import source
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import environment as E
from tracerl.trainer.publish import BuiltinServer, PublishError, PublishTarget, VllmLora, VllmReload
from tracerl.trainer.trackers import RECORD_FILE, TrackerError, TrackerRun, check_trackers, open_trackers
from tracerl.trainer.serving.vllm_process import VllmOptions
from tracerl.trainer.training.backend import PolicyGradientTrainer
from tracerl.trainer.training.backends import load_trainer
from tracerl.trainer.training.dataset import EmptyDatasetError, Sample, read_dataset
from tracerl.trainer.training.model_folder import PolicyFolder, inspect_policy_folder
from tracerl.trainer.training.run import train_and_save


class AgentRunError(RuntimeError):
    """The agent process failed; its output says why."""


class LocalSetupError(ValueError):
    """The options cannot run together; the message says which to change."""


@dataclass(frozen=True)
class PolicyEndpoint:
    """Where the agents send their calls, and per policy the publish target that refreshes what answers to its name."""

    base_url: str  # the agents' OPENAI_BASE_URL
    targets: dict[str, PublishTarget]  # policy (model) name -> its target


@contextmanager
def policy_endpoint(
    server: str, start: Path, tool_call_parser: str | None = None, vllm: VllmOptions = VllmOptions(), lora: PolicyFolder | None = None,
    policies: tuple[str, ...] = (POLICY_MODEL_NAME,),
) -> Iterator[PolicyEndpoint]:
    """``server`` (one of ``SERVERS``) serving ``start`` as policy version 0 until the block ends.

    With ``lora`` (LoRA rounds), vLLM serves the base model with LoRA on and the agents call an
    adapter by its policy's name, one adapter per name of ``policies``; :func:`run_local`
    publishes each starting adapter before round 0. Full weights serve one policy.
    """
    if server == "tracerl":
        from tracerl.trainer.serving.app import running_server

        with running_server(start) as builtin:
            yield PolicyEndpoint(builtin.base_url, {POLICY_MODEL_NAME: BuiltinServer(builtin.base_url)})
    elif server == "vllm":
        from tracerl.trainer.serving.vllm_process import running_vllm

        if lora:
            with running_vllm(lora.base, served_model_name=f"{POLICY_MODEL_NAME}-base", lora_rank=lora.lora_rank, max_loras=max(2, len(policies)),
                              tool_call_parser=tool_call_parser, options=vllm) as served:
                yield PolicyEndpoint(served.base_url, {name: VllmLora(served.base_url, adapter_name=name) for name in policies})
        else:
            with running_vllm(start, served_model_name=POLICY_MODEL_NAME, tool_call_parser=tool_call_parser, options=vllm) as served:
                yield PolicyEndpoint(served.base_url, {POLICY_MODEL_NAME: VllmReload(served.base_url, served_checkpoint=start)})
    else:
        raise ValueError(f"unknown server {server!r}: use one of {', '.join(SERVERS)}")


def lora_policy(start: Path | str, cfg: LocalConfig) -> PolicyFolder | None:
    """What a LoRA run serves: the base model and the adapter's rank (``--lora-rank``, or the
    adapter ``--model`` names); None when the full weights are trained."""
    folder = inspect_policy_folder(start) if Path(start).exists() else PolicyFolder(Path(start), str(start), None)
    if folder.is_adapter:
        return folder
    if cfg.train.lora_rank > 0:
        return replace(folder, lora_rank=cfg.train.lora_rank)
    return None


def write_round_tasks(path: Path, train: list[Task], held_out: list[Task], cfg: LocalConfig, rnd: int) -> None:
    """Held-out tasks greedily, then ``tasks_per_round`` training tasks ``group_size`` times each, seeded per round."""
    rng = random.Random(cfg.seed * 1000 + rnd)
    lines = [{**task, "temperature": 0.0, "seed": 0} for task in held_out[: cfg.eval_tasks]]
    for task in rng.sample(train, min(cfg.tasks_per_round, len(train))):
        for k in range(cfg.group_size):
            lines.append({**task, "temperature": cfg.temperature, "seed": rng.randrange(2**31) + k})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def run_agent(
    recipe: AgentRecipe, tasks_file: Path, data_dir: Path, base_url: str, concurrency: int, max_tokens: int | None = None,
    agent_args: tuple[str, ...] = (), agent_models: dict[str, str] | None = None,
) -> None:
    """Run the recipe's agent with capture switched on by environment variables only
    (and, with several policies, each agent's model name: ``E.AGENT_MODELS_ENV``)."""
    env = {
        **os.environ,
        E.OPENAI_BASE_URL_ENV: base_url,
        E.OPENAI_API_KEY_ENV: "tracerl-loop",
        E.DATA_DIR_ENV: str(data_dir),
        E.OTEL_SERVICE_NAME_ENV: recipe.name,
        E.AGENT_CONCURRENCY_ENV: str(concurrency),
        **({E.AGENT_MAX_TOKENS_ENV: str(max_tokens)} if max_tokens else {}),
        **({E.AGENT_MODELS_ENV: ",".join(f"{agent}={model}" for agent, model in agent_models.items())} if agent_models else {}),
    }
    argv = [*recipe.agent_argv, *agent_args]
    command = [sys.executable, "-m", "tracerl", "run", "--", *argv, str(tasks_file)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise AgentRunError(f"the {recipe.name} agent ({' '.join(argv)}) exited with {done.returncode}:\n{done.stderr[-4000:]}")


JUDGE_REWARD = "judge"
SHUFFLED_REWARD = "shuffled"


def shuffle_within_groups(built: Path, data_dir: Path, rng: random.Random) -> int:
    """The control's rewards: every training episode's whole reward, its outcome and its automatic intermediate
    rewards together (its return in the dataset ``built`` from the round's own rewards), given to another episode
    of the same task group, as late rewards ``rewards/shuffled.parquet`` in ``data_dir``; the episodes permuted.

    Each group keeps its reward values, so the groups whose advantages are not all zero, the
    samples, the updates and every count stay as they were; only which episode earned what is
    lost. What the policy learns from them is whatever the loop teaches without the reward's signal.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = duckdb.sql(f"""
        SELECT coalesce(task_id, '') AS task_group, episode_id, arg_min("return", step) AS episode_return
        FROM read_parquet('{built}/{FILES_GLOB}') WHERE split = 'train' GROUP BY ALL ORDER BY task_group, episode_id
    """).fetchall()
    episodes: list[str] = []
    permuted: list[float] = []
    for _, members in groupby(rows, key=lambda row: row[0]):  # rows come ordered by group
        _, group_episodes, values = zip(*members)
        values = list(values)
        rng.shuffle(values)
        episodes += group_episodes
        permuted += values
    table = pa.table({"episode_id": pa.array(episodes, pa.string()), "name": pa.array([SHUFFLED_REWARD] * len(episodes), pa.string()),
                      "value": pa.array(permuted, pa.float64())})
    path = data_dir / "rewards" / f"{SHUFFLED_REWARD}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return len(episodes)


def groups_with_signal(dataset: Path) -> dict[str, int]:
    """The training task groups of a built round, and how many have an advantage other than 0 (all
    episodes of the rest earned the same: they teach nothing); logged per round for RL and control alike."""
    (groups, signal), = duckdb.sql(f"""
        SELECT count(*), count(*) FILTER (moved) FROM (
            SELECT coalesce(task_id, '') AS task_group, bool_or(abs(advantage) > 1e-12) AS moved
            FROM read_parquet('{dataset}/{FILES_GLOB}') WHERE split = 'train' GROUP BY ALL
        )
    """).fetchall()
    return {"task_groups": int(groups), "groups_with_signal": int(signal)}


def tools_warning(recipe: AgentRecipe, start: Path | str) -> str | None:
    """What to say before round 0 when the ``--model``'s chat template drops the ``tools`` the recipe's agent
    sends: the model would never see them (None: it renders them, or the agent sends none).

    A warning, not a refusal: a model taught the calls some other way (the tiny models of the
    tests, a fine-tuned one) may call tools its template never shows.
    """
    if not recipe.sends_tools:
        return None
    from transformers import AutoTokenizer

    from tracerl.core.chat_template import renders_tools

    if renders_tools(AutoTokenizer.from_pretrained(start)):
        return None
    return (
        f"warning: the chat template of {start} has no place for tools: the {recipe.name} agent's tool definitions never reach the model. "
        "Give the folder a template that renders them (`tracerl model from-gguf FILE --chat-template hermes` for a GGUF; for a "
        "Hugging Face folder, a chat_template.jinja that renders `tools`, as Qwen2.5's and Llama 3.1's do) and serve it with the "
        "matching --tool-call-parser"
    )


def judge_round(data_dir: Path, cfg: LocalConfig) -> dict[str, int]:
    """Score the round's training episodes with the judge (``tracerl pipeline judge``); the row's counts.

    The scores are written into the round's data dir, where the build finds them; the build then
    weighs only them among outcome rewards, so the agent's own reward never reaches training.
    """
    from tracerl.pipeline.judge import JudgeOptions, judge

    rubric = {"rubric": cfg.judge_rubric.read_text(encoding="utf-8")} if cfg.judge_rubric else {}
    options = JudgeOptions(url=cfg.judge_url, model=cfg.judge_model, reward_name=JUDGE_REWARD, splits=("train",),
                           concurrency=cfg.concurrency, **rubric)
    summary = judge(str(data_dir), options)
    return {"judged": summary.scored, "judge_failed": summary.failed, "judge_calls": summary.calls}


class RoundSpans(NamedTuple):
    """What a round's row reads from its captured spans."""

    rewards_by_split: dict[str, float]  # mean episode reward per split (splits without a reward left out)
    generated_tokens: int  # tokens the policy sampled, every split (as captured)


def round_spans(data_dir: Path) -> RoundSpans:
    """The round's mean episode reward per split and generated tokens, from one listing and one scan of its spans
    (the folder is read once however many span files a round leaves). An episode's reward is the sum of the
    rewards it emitted (an execution match and a partial credit are one episode's, not two)."""
    with source.raw_spans_of(data_dir) as con:
        rows = con.sql(f"""
            SELECT split, avg(reward) AS mean_reward, sum(tokens) AS tokens FROM (
                SELECT split, episode_id, sum(reward_value) FILTER (WHERE name = '{A.REWARD_SPAN_NAME}') AS reward,
                       coalesce(sum(len(completion_token_ids)), 0) AS tokens
                FROM raw_spans GROUP BY split, episode_id
            ) GROUP BY split
        """).fetchall()
    rewards = {split: float(value) for split, value, _ in rows if value is not None}
    return RoundSpans(rewards, int(sum(tokens for _, _, tokens in rows)))


def mean_rewards_by_split(data_dir: Path) -> dict[str, float]:
    """Mean episode reward per split, read back from the captured reward spans (:func:`round_spans`)."""
    return round_spans(data_dir).rewards_by_split


def format_replay_samples(
    recipe: AgentRecipe, trainer: PolicyGradientTrainer, train_tasks: list[Task], cfg: LocalConfig, agents: tuple[str, ...] | None = None,
) -> list[Sample]:
    """The recipe's turns to keep, as supervised samples (none without ``format_replay`` or with ``replay_samples`` 0).

    ``agents``: a policy's agents; it replays their turns only (and turns of no agent in particular),
    so one policy's adapter is not taught another's format. Only for the recipe's own warm-started
    tiny model: its format is the tiny model's, never a real model's.
    """
    if recipe.format_replay is None or cfg.replay_samples <= 0:
        return []
    examples = recipe.format_replay(train_tasks, cfg.seed)
    kept = [e for e in examples if agents is None or e.agent is None or e.agent in agents]
    return supervised_samples(trainer.tokenizer, kept)


def rewarded_outputs(samples: Sequence[Sample]) -> list[Sample]:
    """A round's calls whose episode did better than its group (advantage > 0), as supervised samples:
    what ``--replay`` keeps of a real model's own outputs."""
    return [replace(s, target_only=True, response_logprobs=None) for s in samples if s.advantage > 0 and not s.target_only]


def training_setup(cfg: LocalConfig) -> LocalConfig:
    """``cfg`` with the learning rate resolved (given, else the recipe's for its tiny model, else the default for what
    is trained) and the trainer told the training episodes' sampling temperature, whose policy it trains."""
    cfg = replace(cfg, train=replace(cfg.train, rollout_temperature=cfg.temperature or 1.0))
    if cfg.train.learning_rate is None and not cfg.model:
        return replace(cfg, train=replace(cfg.train, learning_rate=cfg.tiny_learning_rate))
    return cfg


def kept_checkpoint_bytes(folder: Path) -> int:
    """Bytes of the checkpoints kept under a policy's folder: its subfolders, not the registry beside them (its timestamps vary in length, and a seed must reproduce the row)."""
    return sum(checkpoint_bytes(child) for child in folder.iterdir() if child.is_dir())


@dataclass
class LocalPolicy:
    """One policy the loop trains: its trainer, its publish target, its folder (checkpoints ``vN``, ``registry.json``).

    One policy (``POLICY_MODEL_NAME``) trains every selected call; with ``--policy``, each is a
    LoRA adapter of its own, trained on the calls of its agents that it served.
    """

    name: str
    trainer: PolicyGradientTrainer
    target: PublishTarget
    folder: Path
    served: Path  # the checkpoint served now: what a failed publish rolls the trainer back to
    rows: str | None  # the policy_name of its dataset rows (None: the only policy, every row)
    version: int = 0
    replay: list[Sample] = field(default_factory=list)  # with --model --replay, its own best outputs

    @property
    def registry(self) -> PolicyRegistry:
        return PolicyRegistry(self.folder)


def check_setup(cfg: LocalConfig, endpoint: PolicyEndpoint | None) -> None:
    """Refuse, before anything starts, options that cannot run together."""
    lora = cfg.train.lora_rank > 0 or bool(cfg.model and lora_policy(cfg.model, cfg))
    if not endpoint and cfg.server != "vllm" and lora:
        raise LocalSetupError("LoRA rounds publish adapters, which `tracerl serve` does not load: use --server vllm (it swaps the adapter in place)")
    if cfg.shuffle_rewards and cfg.judge_url:
        raise LocalSetupError("--shuffle-rewards permutes the agent's own rewards; with --judge-url there are none to train on: use one or the other")
    if not cfg.policies:
        return
    try:
        check_policies(cfg.policies, cfg.agents)
    except PipelineInputError as exc:
        raise LocalSetupError(str(exc)) from None
    if not lora:
        raise LocalSetupError("several policies are LoRA adapters on one base model: add --lora-rank R (and --server vllm)")
    if f"{POLICY_MODEL_NAME}-base" in cfg.policies:
        raise LocalSetupError(f"{POLICY_MODEL_NAME}-base is the base model's name: give the policy another")


def run_folder(recipe: AgentRecipe, cfg: LocalConfig) -> Path:
    """Where a run writes: ``--out``, else ``runs/RECIPE``."""
    return Path(cfg.out or Path("runs") / recipe.name)


def run_local(
    recipe: AgentRecipe, cfg: LocalConfig, on_phase: Callable[[int, str], None] | None = None, endpoint: PolicyEndpoint | None = None
) -> list[dict]:
    """Run ``cfg.rounds`` training rounds of ``recipe`` (plus round 0); return the metrics rows.

    The agents call ``endpoint`` when given (already serving the starting policy), else
    ``cfg.server`` started here on it.
    """
    from tracerl.pipeline import build_dataset

    def phase(rnd: int, text: str) -> None:
        if on_phase:
            on_phase(rnd, text)

    out = run_folder(recipe, cfg)
    earlier = sorted((out / "policy").glob("**/registry.json"))
    if earlier:  # its registry would refuse a second version 0, after the rows of its metrics were gone
        raise LocalSetupError(f"{out} holds an earlier run ({earlier[0]}): give --out another folder, or delete {out} to start over")
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / A.RUN_METRICS_FILE
    metrics_path.write_text("")
    cfg = training_setup(cfg)
    check_setup(cfg, endpoint)
    try:
        check_trackers(cfg.train.report_to)  # a package missing: said before round 0
    except TrackerError as exc:
        raise LocalSetupError(str(exc)) from None
    phase(0, "preparing the starting policy")
    start = Path(cfg.model) if cfg.model else starting_policy(recipe, cfg.seed, cfg.data)
    lora = lora_policy(start, cfg)
    warning = tools_warning(recipe, lora.base if lora else start) if cfg.model else None
    if warning:
        phase(0, warning)
    agent_args = (*(() if cfg.model else recipe.tiny_agent_args), *cfg.agent_args)
    names = tuple(cfg.policies) or (POLICY_MODEL_NAME,)
    several = bool(cfg.policies)
    train_tasks, held_out = recipe.tasks(cfg.seed, cfg.data)
    replay_on = cfg.replay if cfg.replay is not None else not cfg.model
    agent_models = {agent: name for name, agents in cfg.policies.items() for agent in agents}
    rows: list[dict] = []
    at = [0]  # the round a tracker's warning is said in
    tracker_run = TrackerRun(out.resolve().name, out, out / RECORD_FILE)
    with (open_trackers(cfg.train.report_to, tracker_run, {"recipe": recipe.name, **asdict(cfg)}, warn=lambda text: phase(at[0], f"warning: {text}"))
          as trackers, nullcontext(endpoint) if endpoint else policy_endpoint(cfg.server, start, cfg.tool_call_parser, cfg.vllm, lora, names) as served):
        policies = []
        for name in names:
            trainer = load_trainer(cfg.backend, start, cfg.train, cfg.chosen_backend_options)
            folder = out / "policy" / name if several else out / "policy"
            policy = LocalPolicy(name, trainer, served.targets[name], folder, start, name if several else None)
            if lora and not endpoint:  # the agents call the adapter: the starting one (untrained LoRA is the base model) first
                policy.served = trainer.save(folder / "v0")
                release(policy.registry, VersionEntry(0, "base", None, str(policy.served)), [policy.target])
            else:
                policy.registry.append(VersionEntry(0, "base", None, str(start)))
            policies.append(policy)
        trainer = policies[0].trainer
        phase(0, f"training {', '.join(names)} with {cfg.backend} on {trainer.device}, learning rate {trainer.learning_rate:g}")
        format_replay = {
            p.name: format_replay_samples(recipe, p.trainer, train_tasks, cfg, cfg.policies.get(p.name)) if replay_on and not cfg.model else []
            for p in policies
        }
        for rnd in range(cfg.rounds + 1):
            clock, at[0] = PhaseClock(), rnd  # the round's one clock: every phase, each policy's part too
            round_dir = out / "rounds" / f"{rnd:03d}"
            round_dir.mkdir(parents=True, exist_ok=True)
            tasks_file = round_dir / "tasks.jsonl"
            phase(rnd, "running the agent")
            with clock("rollout"):
                write_round_tasks(tasks_file, train_tasks, held_out, cfg, rnd)
                run_agent(recipe, tasks_file, round_dir / "data", served.base_url, cfg.concurrency, cfg.max_tokens, agent_args, agent_models)
                rewards, generated = round_spans(round_dir / "data")
            judged = {}
            if cfg.judge_url:
                phase(rnd, "judging the training episodes")
                with clock("judge"):
                    judged = judge_round(round_dir / "data", cfg)
            phase(rnd, "building the dataset")
            build = dict(splits=("train",), credit=cfg.credit, gamma=cfg.gamma, trajectory=cfg.trajectory, default_rules=cfg.air,
                         agents=cfg.agents, policies=cfg.policies)
            with clock("build"):
                if cfg.shuffle_rewards:  # built once with the round's own rewards, whose returns the control then permutes
                    build_dataset(round_dir / "data", round_dir / "dataset-own-rewards", **build)
                    judged = {"shuffled_episodes": shuffle_within_groups(
                        round_dir / "dataset-own-rewards", round_dir / "data", random.Random(cfg.seed * 1000 + rnd + 500))}
                    build.update(default_rules=False)  # the intermediate rewards are in the permuted returns
                manifest = build_dataset(
                    round_dir / "data", round_dir / "dataset", **build,
                    reward_weights={JUDGE_REWARD: 1.0} if cfg.judge_url else {SHUFFLED_REWARD: 1.0} if cfg.shuffle_rewards else {},
                )
                signal = groups_with_signal(round_dir / "dataset") if manifest["counts"]["transitions"] else {"task_groups": 0, "groups_with_signal": 0}
            calls = manifest["counts"]["llm_calls"]
            for name, missing in calls["policy_agents_unseen"].items():
                phase(rnd, f"warning: policy {name} names agent(s) no call has: {', '.join(missing)} (seen: {', '.join(calls['by_agent'])})")
            row = {
                "round": rnd,
                **({} if several else {"policy_version": policies[0].version}),
                "train_mean_reward": rewards.get("train"),
                "eval_mean_reward": rewards.get("test"),
                "transitions": int(manifest["counts"]["transitions"]),
                "generated_tokens": generated,
                **({"wrong_policy_calls": calls["skipped"].get("wrong_policy", 0)} if several else {}),
                **signal,
                **judged,
            }
            per_policy = {}
            for policy in policies:
                fields: dict = {"policy_version": policy.version}
                if rnd < cfg.rounds:
                    phase(rnd, f"training {policy.name}" if several else "training")
                    with clock.part({}) if several else nullcontext(clock.seconds) as seconds:
                        fields.update(train_and_publish(policy, round_dir / "dataset", format_replay[policy.name], cfg, rnd, clock,
                                                        lambda text: phase(rnd, text)))
                    if several:
                        fields.update(time_fields(seconds))
                per_policy[policy.name] = fields
            if several:
                row["policies"] = per_policy
            else:
                row.update(per_policy[POLICY_MODEL_NAME])
            row.update(time_fields(clock.seconds), seconds=round(clock.total, 3))
            rows.append(row)
            with metrics_path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
            trackers.log(row, step=rnd)
            plot_reward_curve(rows, out / "reward_curve.png", recipe.title)
            trackers.log_artifact(out / "reward_curve.png", step=rnd)
    (out / "config.json").write_text(json.dumps({"recipe": recipe.name, **asdict(cfg)}, default=str, indent=2))
    return rows


def train_and_publish(
    policy: LocalPolicy, dataset: Path, format_replay: list[Sample], cfg: LocalConfig, rnd: int, clock: PhaseClock,
    phase: Callable[[str], None],
) -> dict:
    """One policy's part of a round: train its trainer on its rows (and ``replay_samples`` replayed ones: the recipe's
    format turns, or with ``--model --replay`` the policy's own best outputs), save the checkpoint with its manifest,
    publish it as the policy's next version and record it, timed on the round's ``clock``; the row's training fields
    (:func:`~tracerl.orchestration.round_record.metrics_row`).

    A policy with nothing to train on this round is recorded as skipped in its registry (``status`` skipped); one whose
    publish fails keeps serving its previous version, its trainer goes back to those weights
    and the checkpoint moves to ``failed/`` (``status`` publish_failed): the others go on.
    """
    rows = DatasetFolder(dataset)

    def skip(reason: str) -> dict:
        record = policy.registry.record_skip(rnd, [f.name for f in rows.files()], len(rows.episodes(policy.rows)), reason)
        return skip_row(record)

    version = policy.version + 1
    with clock("train"):
        try:
            samples, skipped = read_dataset(dataset, policy=policy.rows)
        except EmptyDatasetError as exc:
            return skip(str(exc))
        dropped = 0
        if cfg.drop_zero_advantage:  # their policy-gradient term is 0: a forward and backward pass for nothing
            kept_samples = samples.take(np.flatnonzero(samples.advantage != 0))  # still columns
            dropped = len(samples) - len(kept_samples)
            if not kept_samples:
                return {**skip(f"every one of the {dropped} samples has advantage 0 (no group's episodes differed)"), "zero_advantage_dropped": dropped}
            samples = kept_samples
        pool = format_replay + policy.replay  # one of them is empty
        kept = random.Random(cfg.seed * 1000 + rnd).sample(pool, min(cfg.replay_samples, len(pool)))
        if cfg.replay and cfg.model:  # a real model replays its own best outputs, from the next round on
            policy.replay = (policy.replay + rewarded_outputs(samples))[-4 * max(cfg.replay_samples, 1) :]
        trained = train_and_save(
            policy.trainer, samples + kept, skipped, dataset=dataset, parent=policy.served, parent_version=policy.version,
            out=policy.folder / f"v{version}", backend=cfg.backend, options=cfg.chosen_backend_options, version=version,
            on_saving=lambda: clock.mark("checkpoint"),
        )
    entry = trained_entry(trained.checkpoint, version, policy.version, rows, policy.rows, seconds=clock.seconds)
    phase(f"publishing {policy.name} v{version}" if policy.rows else "publishing")
    try:
        recorded = release(policy.registry, entry, [policy.target], keep=cfg.keep_checkpoints, clock=clock)
    except PublishError as exc:
        failed = policy.folder / "failed" / f"v{version}-round{rnd}"
        failed.parent.mkdir(parents=True, exist_ok=True)
        os.replace(trained.checkpoint, failed)
        policy.trainer = load_trainer(cfg.backend, policy.served, cfg.train, cfg.chosen_backend_options)
        made = {name: value for name, value in metrics_row(entry.as_dict()).items() if name != "version"}  # no version made
        return {**made, "zero_advantage_dropped": dropped, "status": "publish_failed", "reason": str(exc), "checkpoint": str(failed)}
    policy.version, policy.served = version, trained.checkpoint
    return {**metrics_row(recorded), "zero_advantage_dropped": dropped, "kept_checkpoint_bytes": kept_checkpoint_bytes(policy.folder)}
