"""The demo's starting policy: the tiny model, taught the task's format but not the task.

A randomly initialised model never emits a tool name, so reinforcement learning would
see no reward at all; like the paper's instruct model, the starting policy knows the
format and is poor at the task (it names the right tool one time in three).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tracerl.trainer.demo import task as demo_task
from tracerl.trainer.tiny_model import build_tiny_model, default_cache_dir
from tracerl.trainer.training.config import TrainConfig
from tracerl.trainer.training.dataset import Sample
from tracerl.trainer.training.torch_backend import TRAINER_STATE_FILE, PolicyTrainer

DEMO_POLICY_VERSION = 6  # bump when the warm-start recipe changes, so stale caches are rebuilt


def ensure_demo_policy(seed: int = 0) -> Path:
    """The warm-started policy for ``seed`` (built on first use, then cached)."""
    path = default_cache_dir() / f"demo-policy-v{DEMO_POLICY_VERSION}-seed{seed}"
    if (path / "config.json").exists():
        return path
    base = build_tiny_model(path.with_name(path.name + f".base-{os.getpid()}"), seed=seed)
    trainer = PolicyTrainer(base, TrainConfig(learning_rate=3e-3, minibatch_size=64, seed=seed))
    train_tasks, _ = demo_task.all_tasks(seed)
    tool_turns, answer_turns = demo_task.format_examples(train_tasks, 1500, seed=seed)
    copies = supervised_samples(trainer.tokenizer, [t for t in answer_turns if not t[0][-1]["content"].startswith("error")])
    # Copying first, until it is learned: mixed with the deliberately random turns from
    # the start, the tiny model does not find the copy mechanism within this budget.
    for _ in range(12):
        if trainer.train(copies, epochs=1).loss < 0.05:
            break
    trainer.train(supervised_samples(trainer.tokenizer, tool_turns + answer_turns), epochs=1)
    trainer.save(path)
    (path / TRAINER_STATE_FILE).unlink()  # RL starts with a fresh optimizer
    shutil.rmtree(base, ignore_errors=True)
    return path


def supervised_samples(tokenizer, examples: Sequence[demo_task.Example]) -> list[Sample]:
    """Chat examples (messages, target text) as samples the trainer imitates."""
    samples = []
    for messages, target in examples:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        samples.append(Sample(prompt_token_ids=prompt_ids, response_token_ids=response_ids, advantage=0.0, target_only=True))
    return samples
