"""Training tokens/s and peak memory of the two backends, by micro-batch and process count, same samples.

Every configuration trains the same model from the same starting weights on the same synthetic
round (``--samples`` LLM calls of ``--prompt-tokens`` + ``--response-tokens`` random token ids,
with the log-probs the starting weights give, advantages +-1) in a fresh process, so each
peak memory (RSS on CPU, max allocated on CUDA) is that configuration's alone. Each is timed
over ``train()`` after a warm-up round that is not counted (first-call allocations,
DeepSpeed's lazy set-up), ``--repeats`` times; the median is printed. Tokens are response
tokens trained on. The torch backend runs in one process; the OpenRLHF backend in one and
in two (``torchrun``, gloo on CPU, each minibatch split over the ranks).

    python benchmarks/train_backends.py                       # a ~100M-parameter Qwen2 on CPU
    python benchmarks/train_backends.py --hidden 256 --layers 4 --micro-batches 1,4   # quick
    python benchmarks/train_backends.py --model DIR --samples 256 --minibatch-size 32

Run it on a quiet machine: two processes share its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    """One configuration, in this process (or this rank): prints one JSON line on rank 0."""
    from tracerl.trainer.training.backends import load_trainer
    from tracerl.trainer.training.config import OpenRLHFOptions, TrainConfig
    from tracerl.trainer.training.device import end_process_group
    from tracerl_testing.training_workload import random_round

    config = TrainConfig(learning_rate=1e-5, epochs=args.epochs, minibatch_size=args.minibatch_size, micro_batch_size=args.micro_batch)
    options = OpenRLHFOptions(zero_stage=args.zero_stage) if args.backend == "openrlhf" else None
    trainer = load_trainer(args.backend, args.model, config, options)
    vocab = json.loads((args.model / "config.json").read_text())["vocab_size"]
    samples = random_round(vocab, args.samples, args.prompt_tokens, args.response_tokens)
    samples = [replace(s, response_logprobs=lp) for s, lp in zip(samples, trainer.action_logprobs(samples))]
    trainer.train(samples)  # warm-up
    seconds, metrics = [], None
    for _ in range(args.repeats):
        started = time.perf_counter()
        metrics = trainer.train(samples)
        seconds.append(time.perf_counter() - started)
    if trainer.rank == 0:
        print(json.dumps({"seconds": statistics.median(seconds), "tokens": metrics.tokens, "peak_memory_bytes": metrics.peak_memory_bytes,
                          "world_size": metrics.world_size, "micro_batch": metrics.micro_batch_size}), flush=True)
    end_process_group()  # every rank leaves the group, so torchrun's processes exit cleanly


def run_configuration(args: argparse.Namespace, model: Path, backend: str, processes: int, micro_batch: int) -> dict:
    flags = [
        "--worker", "--model", str(model), "--backend", backend, "--micro-batch", str(micro_batch), "--samples", str(args.samples),
        "--prompt-tokens", str(args.prompt_tokens), "--response-tokens", str(args.response_tokens), "--minibatch-size", str(args.minibatch_size),
        "--epochs", str(args.epochs), "--repeats", str(args.repeats), "--zero-stage", str(args.zero_stage),
    ]
    script = str(Path(__file__).resolve())
    if processes == 1:
        command = [sys.executable, script, *flags]
    else:
        from tracerl.core.net import free_port

        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
        command = [torchrun, "--nproc_per_node", str(processes), "--master_port", str(free_port()), script, *flags]
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // processes))}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        sys.exit(f"{backend} x{processes} micro-batch {micro_batch} failed:\n{done.stderr[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="HF checkpoint (default: a Qwen2 of --hidden/--layers, built locally)")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=96)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--minibatch-size", type=int, default=16)
    parser.add_argument("--micro-batches", default="1,4,16")
    parser.add_argument("--processes", default="1,2", help="process counts of the OpenRLHF backend")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--zero-stage", type=int, default=2, help="the OpenRLHF backend's DeepSpeed ZeRO stage")
    # one configuration in this process (what the driver starts)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--micro-batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    sys.path.insert(0, str(REPO))
    from tracerl_testing.qwen2_model import TINY, build_qwen2_model
    from tracerl_testing.training_workload import stored_parameters

    with tempfile.TemporaryDirectory() as scratch:
        model = args.model
        if model is None:
            shape = {**TINY, "hidden_size": args.hidden, "intermediate_size": 8 * args.hidden // 3, "num_hidden_layers": args.layers,
                     "num_attention_heads": args.hidden // 64, "num_key_value_heads": max(1, args.hidden // 256), "vocab_size": args.vocab}
            model = build_qwen2_model(Path(scratch) / "model", shape)
        parameters = stored_parameters(model)
        print(f"{parameters / 1e6:.0f}M parameters; {args.samples} samples x ({args.prompt_tokens} prompt + {args.response_tokens} response) tokens, "
              f"{args.epochs} epoch(s), minibatch {args.minibatch_size}, OpenRLHF with ZeRO-{args.zero_stage}, median of {args.repeats}, {os.cpu_count()} cores")
        print(f"{'backend':<10} {'procs':>5} {'micro':>5} {'seconds':>8} {'tokens/s':>9} {'peak MiB':>9} {'vs torch':>8}")
        baseline: dict[int, float] = {}
        for backend, counts in (("torch", [1]), ("openrlhf", [int(p) for p in args.processes.split(",")])):
            for processes in counts:
                for micro in (int(m) for m in args.micro_batches.split(",")):
                    row = run_configuration(args, model, backend, processes, micro)
                    rate = row["tokens"] / row["seconds"]
                    baseline.setdefault(micro, rate) if backend == "torch" else None
                    ratio = f"{rate / baseline[micro]:.2f}x" if micro in baseline else "-"
                    peak = row["peak_memory_bytes"] / 2**20  # per process
                    print(f"{backend:<10} {processes:>5} {micro:>5} {row['seconds']:>8.2f} {rate:>9.0f} {peak:>9.0f} {ratio:>8}", flush=True)


if __name__ == "__main__":
    main()
