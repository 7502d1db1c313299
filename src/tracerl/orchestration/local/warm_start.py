"""A recipe's starting policy: the tiny model, taught the format of the agent's answers but not the task.

A randomly initialised model never writes a tool call or a query, so reinforcement
learning would see no reward at all. Like the paper's instruct models, the starting policy
knows the format and is poor at the task: each recipe's examples choose the input-dependent
part (which tool, which expression, which table) at random, on training tasks only.

Prompts are rendered by the policy server's own code (``serving.prompts``) from the
OpenAI-shaped messages, so the model is taught on exactly the prompts it is later asked.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME, cache_dir
from tracerl.orchestration.local.recipe import AgentRecipe, FormatExample
from tracerl.trainer.serving.prompts import chat_prompt_ids
from tracerl.trainer.serving.protocol import ChatCompletionRequest
from tracerl.trainer.tiny_model import build_tiny_model, tiny_model_key
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample
from tracerl.trainer.training.torch_backend import PolicyTrainer

WARM_START_LEARNING_RATE = 1e-3


def starting_policy(recipe: AgentRecipe, seed: int, data: Path | None = None) -> Path:
    """The warm-started tiny model of ``recipe`` for ``seed`` (built on first use, then cached).

    With ``data`` (a public data set the recipe reads) the training tasks differ, so the
    cache key holds the file's name, size and modification time.
    """
    key = f"{recipe.name}-v{recipe.version}-{tiny_model_key(recipe.tokenizer_corpus)}-seed{seed}"
    if data is not None:
        stat = Path(data).stat()
        key += "-" + hashlib.sha256(f"{Path(data).resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:10]
    path = cache_dir() / "policies" / key
    if (path / "config.json").exists():
        return path
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    build_tiny_model(tmp, seed=seed, corpus=recipe.tokenizer_corpus)
    if recipe.warm_start is not None:
        trainer = PolicyTrainer(tmp, TrainConfig(learning_rate=WARM_START_LEARNING_RATE, minibatch_size=64, seed=seed))
        train_tasks, _ = recipe.tasks(seed, data)
        for stage in recipe.warm_start(train_tasks, seed):
            samples = supervised_samples(trainer.tokenizer, stage.examples)
            for group in trainer.optimizer.param_groups:
                group["lr"] = stage.learning_rate or WARM_START_LEARNING_RATE
            for _ in range(stage.max_epochs):
                if trainer.train(samples, epochs=1).loss < stage.stop_below_loss:
                    break
        trainer.save(tmp)  # weights only: RL starts with a fresh optimizer
    try:
        os.replace(tmp, path)
    except OSError:  # another process won the race; its policy is built from the same seed
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def supervised_samples(tokenizer, examples: Sequence[FormatExample]) -> list[Sample]:
    """Format examples as samples the trainer imitates, prompts rendered as the server renders them."""
    samples = []
    for example in examples:
        request = ChatCompletionRequest(model=POLICY_MODEL_NAME, messages=example.messages, tools=example.tools)
        prompt_ids = chat_prompt_ids(tokenizer, request)
        response_ids = tokenizer(example.target, add_special_tokens=False)["input_ids"]
        if example.ends_turn:
            response_ids.append(tokenizer.eos_token_id)
        samples.append(Sample(prompt_token_ids=prompt_ids, response_token_ids=response_ids, advantage=0.0, target_only=True))
    return samples
