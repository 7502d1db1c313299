"""Training tokens/s of the OpenRLHF backend next to the torch backend, same samples, same machine.

Both train the tiny local model (or ``--model``) from the same starting weights on the
same synthetic round: ``--samples`` LLM calls of ``--prompt-tokens`` + ``--response-tokens``
random token ids, with the log-probs the starting weights give (as a server on them logs),
advantages +-1. Each backend is timed over ``train()`` alone, after a warm-up round that
is not counted (first-call allocations, DeepSpeed's lazy set-up), ``--repeats`` times; the
median is printed. Tokens are action (response) tokens trained on, epochs included.

    python benchmarks/train_backends.py                  # tiny model, CPU
    python benchmarks/train_backends.py --model DIR --samples 256 --minibatch-size 32
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.trainer.training.config import OpenRLHFOptions, TrainConfig
from tracerl.trainer.training.dataset import Sample
from tracerl.trainer.training.openrlhf_backend import OpenRLHFTrainer
from tracerl.trainer.training.torch_backend import PolicyTrainer


def synthetic_round(vocab: int, n: int, prompt_tokens: int, response_tokens: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    return [
        Sample(
            prompt_token_ids=[rng.randrange(vocab) for _ in range(prompt_tokens)],
            response_token_ids=[rng.randrange(vocab) for _ in range(response_tokens)],
            advantage=1.0 if i % 2 else -1.0,
        )
        for i in range(n)
    ]


def timed_rounds(trainer, samples: list[Sample], repeats: int) -> tuple[float, int]:
    trainer.train(samples)  # warm-up
    seconds, tokens = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        metrics = trainer.train(samples)
        seconds.append(time.perf_counter() - started)
        tokens = metrics.tokens
    return statistics.median(seconds), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="HF checkpoint (default: the tiny model, built locally)")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--minibatch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--zero-stage", type=int, default=OpenRLHFOptions.zero_stage, help="the OpenRLHF backend's DeepSpeed ZeRO stage")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or build_tiny_model(Path(scratch) / "tiny", seed=0)
        config = TrainConfig(learning_rate=1e-4, epochs=args.epochs, minibatch_size=args.minibatch_size)
        openrlhf = OpenRLHFTrainer(model, config, OpenRLHFOptions(zero_stage=args.zero_stage))
        round_ = synthetic_round(len(openrlhf.tokenizer), args.samples, args.prompt_tokens, args.response_tokens, seed=0)
        round_ = [replace(s, response_logprobs=lp) for s, lp in zip(round_, openrlhf.action_logprobs(round_))]
        rows = {"torch": timed_rounds(PolicyTrainer(model, config), round_, args.repeats)}
        rows["openrlhf"] = timed_rounds(openrlhf, round_, args.repeats)

    print(f"{args.samples} samples x ({args.prompt_tokens} prompt + {args.response_tokens} response) tokens, "
          f"{args.epochs} epochs, minibatch {args.minibatch_size}, OpenRLHF with ZeRO-{args.zero_stage}, median of {args.repeats}")
    print(f"{'backend':<10} {'seconds':>8} {'tokens':>8} {'tokens/s':>10}")
    for name, (seconds, tokens) in rows.items():
        print(f"{name:<10} {seconds:>8.2f} {tokens:>8d} {tokens / seconds:>10.0f}")
    (t_s, t_n), (o_s, o_n) = rows["torch"], rows["openrlhf"]
    print(f"openrlhf / torch tokens/s: {(o_n / o_s) / (t_n / t_s):.2f}")


if __name__ == "__main__":
    main()
