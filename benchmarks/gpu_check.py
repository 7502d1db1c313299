"""The GPU check: both training backends on a model of Qwen2.5-1.5B's shape, one JSON line of figures.

For the first GPU machine tracerl meets: it needs only a CUDA build of torch with transformers
and peft (what such machines carry); nothing is downloaded. It builds a model of
Qwen2.5-1.5B's shape (``--size 7b``: 7B's) with random weights (throughput and memory do not depend on the
weights), makes ``--samples`` samples of random token ids with "served" log-probs from a plain
Hugging Face forward, then trains one round on them with the torch backend and with the
OpenRLHF backend (bf16, ZeRO ``--zero-stage``, gradient checkpointing, micro-batches of
``--micro-batch``), one after the other in this process. It prints one JSON line on stdout (nothing else goes there): per backend,
training tokens/s, peak memory, seconds, micro-batch, and the largest and mean difference
between the trainer's log-probs and the plain forward's (float32) on the same weights.

What else it needs travels as wheels (under 64 MiB; the GPU machine's Python is 3.12), made
on any machine with pip, from the repository root::

    PL="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PL -d .whl \\
        openrlhf==0.11.2 hjson pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection \\
        orjson pylatexenc torchdata datasets dill multiprocess starlette uvicorn  # the last two: the trainer tests
    DS_BUILD_OPS=0 pip wheel --no-deps --no-build-isolation -w .whl deepspeed==0.19.6
    # flash-attn's Python parts (OpenRLHF imports them; its CUDA kernels are not needed: sdpa runs)
    mkdir -p .whl/site && cp -r "$(python -c 'import flash_attn,os;print(os.path.dirname(flash_attn.__file__))')" .whl/site/

and on the GPU machine, ``bash benchmarks/gpu_suite.sh`` (installs and runs the checks below and the
trainer tests, each within a time limit), or by hand::

    pip install --no-index --no-deps --target /tmp/site .whl/*.whl && pip install --no-deps --no-build-isolation --target /tmp/site . ./testing
    PYTHONPATH=/tmp/site:.whl/site python benchmarks/gpu_check.py                 # 1.5B, ZeRO-2, full weights
    PYTHONPATH=/tmp/site:.whl/site python benchmarks/gpu_check.py --zero-stage 3
    PYTHONPATH=/tmp/site:.whl/site python benchmarks/gpu_check.py --lora-rank 16
    PYTHONPATH=/tmp/site:.whl/site python benchmarks/gpu_check.py --size 7b --lora-rank 16

On CPU (what CI runs): ``python benchmarks/gpu_check.py --device cpu --tiny``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--tiny", action="store_true", help="a few-million-parameter model of the same architecture")
    p.add_argument("--size", choices=("1.5b", "7b"), default="1.5b", help="the Qwen2.5 model whose shape is built")
    p.add_argument("--samples", type=int, default=None, help="samples in the round (default 32, tiny 8)")
    p.add_argument("--prompt-tokens", type=int, default=None, help="default 768, tiny 48")
    p.add_argument("--response-tokens", type=int, default=None, help="default 256, tiny 16")
    p.add_argument("--minibatch", type=int, default=None, help="samples per optimizer step (default 16, tiny 4)")
    p.add_argument("--micro-batch", type=int, default=None, help="samples per forward/backward (default 4, tiny 2)")
    p.add_argument("--zero-stage", type=int, default=2)
    p.add_argument("--lora-rank", type=int, default=0)
    p.add_argument("--adam-offload", action="store_true", help="openrlhf: Adam's states in host memory")
    p.add_argument("--untied", action="store_true", help="separate input and output embeddings (Qwen2.5-1.5B ties them)")
    p.add_argument("--backends", default="torch,openrlhf")
    p.add_argument("--out", type=Path, default=Path("/tmp/tracerl-gpu-check"))
    args = p.parse_args()
    small = args.tiny
    for name, big, tiny in (("samples", 32, 8), ("prompt_tokens", 768, 48), ("response_tokens", 256, 16), ("minibatch", 16, 4), ("micro_batch", 4, 2)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if small else big)
    return args


def plain_forward_logprobs(folder: Path, samples, device) -> list[list[float]]:
    """Response log-probs from an ordinary float32 Hugging Face forward, one sample at a time (the reference)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").to(device).eval()
    out = []
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt_token_ids + s.response_token_ids], device=device)
            logits = model(input_ids=ids).logits[0, :-1].float()
            lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            out.append(lp[len(s.prompt_token_ids) - 1 :].tolist())
            del logits
    del model
    return out


def free(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def check_backend(backend: str, folder: Path, samples, reference, args: argparse.Namespace, device) -> dict:
    from tracerl.trainer.training.backends import load_trainer
    from tracerl.trainer.training.config import OpenRLHFOptions, TrainConfig

    config = TrainConfig(
        learning_rate=1e-6, epochs=1, minibatch_size=args.minibatch, micro_batch_size=args.micro_batch,
        lora_rank=args.lora_rank, gradient_checkpointing=device.type == "cuda",
    )
    began = time.perf_counter()
    trainer = load_trainer(backend, folder, config, OpenRLHFOptions(zero_stage=args.zero_stage, adam_offload=args.adam_offload) if backend == "openrlhf" else None)
    load_seconds = time.perf_counter() - began
    trainer_lp = trainer.action_logprobs(samples)
    diffs = [abs(a - b) for mine, ref in zip(trainer_lp, reference) for a, b in zip(mine, ref)]
    served = [replace(s, response_logprobs=lp) for s, lp in zip(samples, reference)]
    metrics = trainer.train(served)
    row = {
        "tokens_per_second": metrics.tokens_per_second, "peak_memory_gib": round(metrics.peak_memory_bytes / 2**30, 2),
        "train_seconds": metrics.seconds, "load_seconds": round(load_seconds, 1), "micro_batch": metrics.micro_batch_size,
        "steps": metrics.steps, "loss": metrics.loss, "dtype": config.dtype or ("bf16" if device.type == "cuda" else "fp32"),
        "logprob_max_diff_vs_hf_fp32": round(max(diffs), 5), "logprob_mean_diff_vs_hf_fp32": round(sum(diffs) / len(diffs), 6),
        "is_filtered_fraction": metrics.is_filtered_fraction,
    }
    del trainer
    free(device)
    return row


def main() -> None:
    # stdout is the JSON line alone: what libraries print there while loading (transformers' "[MoE] ...") goes to stderr
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        run(parse_args(), stdout)


def run(args: argparse.Namespace, stdout) -> None:
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    from tracerl.trainer.training.device import training_device
    device = training_device()
    if args.device == "cuda" and device.type != "cuda":
        sys.exit("--device cuda: torch sees no GPU")
    from tracerl_testing.qwen2_model import QWEN25_7B, QWEN25_15B, TINY, build_qwen2_model
    from tracerl_testing.training_workload import random_round, stored_parameters

    shape = TINY if args.tiny else {"1.5b": QWEN25_15B, "7b": QWEN25_7B}[args.size]
    if args.untied:
        shape = {**shape, "tie_word_embeddings": False}
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    name = "tiny Qwen2" if args.tiny else f"Qwen2.5-{args.size.upper()} shape"
    folder = build_qwen2_model(args.out / name.replace(" ", "-"), shape, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    build_seconds = time.perf_counter() - began
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    samples = random_round(vocab, args.samples, args.prompt_tokens, args.response_tokens)
    reference = plain_forward_logprobs(folder, samples, device)
    free(device)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__, "model": name,
        "parameters": stored_parameters(folder),
        "samples": args.samples, "tokens_per_sample": args.prompt_tokens + args.response_tokens, "minibatch": args.minibatch,
        "zero_stage": args.zero_stage, "lora_rank": args.lora_rank, "adam_offload": args.adam_offload,
        "tied_embeddings": shape["tie_word_embeddings"], "build_seconds": round(build_seconds, 1),
    }
    for backend in args.backends.split(","):
        result[backend] = check_backend(backend, folder, samples, reference, args, device)
    print(json.dumps(result), file=stdout, flush=True)


if __name__ == "__main__":
    main()
