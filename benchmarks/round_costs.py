"""What one round of the loop costs on a model of a real architecture, per phase, with each backend.

Runs ``python -m examples.X.train`` as a user would (``--model`` a local Qwen2-architecture
folder where they would name a hub id, ``--server vllm``), once per backend (and once with a
LoRA adapter), and prints per round: rollout, dataset build, training, checkpoint save and
publish seconds, bytes the checkpoint wrote and bytes kept on disk after pruning; then per
backend the mean of the training rounds and its ratio to the torch backend.

    python benchmarks/round_costs.py                        # sql, 3 rounds, the 3.4M-parameter Qwen2 model
    python benchmarks/round_costs.py --example calc --rounds 4 --hidden 512

Needs the CPU vLLM's venv (``TRACERL_VLLM_PYTHON`` or ``.venv-vllm``) and the openrlhf extra.
Run it on a quiet machine: the agents, vLLM and the trainer share its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tracerl.schemas import environment as E

REPO = Path(__file__).resolve().parents[1]
PHASES = ("rollout_seconds", "build_seconds", "train_seconds", "checkpoint_seconds", "publish_seconds")
RUNS = {"torch": ["--backend", "torch"], "openrlhf": ["--backend", "openrlhf"], "torch+lora8": ["--backend", "torch", "--lora-rank", "8"]}


def run(example: str, model: Path, name: str, rounds: int, out: Path) -> list[dict]:
    command = [
        sys.executable, "-m", f"examples.{example}.train", "--model", str(model), "--server", "vllm", *RUNS[name],
        "--rounds", str(rounds), "--tasks-per-round", "4", "--group-size", "4", "--eval-tasks", "4", "--max-tokens", "32",
        "--tool-call-parser", "hermes", "--out", str(out),
    ]
    env = {**os.environ, E.VLLM_PYTHON_ENV: os.environ.get(E.VLLM_PYTHON_ENV, str(REPO / ".venv-vllm" / "bin" / "python"))}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="sql", choices=("sql", "calc"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256, help="hidden size of the Qwen2 model (256: 3.4M parameters)")
    parser.add_argument("--runs", default=",".join(RUNS))
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tracerl_testing.qwen2_model import TINY, build_qwen2_model

    work = Path(tempfile.mkdtemp(prefix="tracerl-round-costs-"))
    shape = {**TINY, "hidden_size": args.hidden, "intermediate_size": 3 * args.hidden, "num_attention_heads": args.hidden // 64,
             "num_key_value_heads": max(1, args.hidden // 128)}
    model = build_qwen2_model(work / "model", shape)
    model_bytes = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    print(f"{args.example}: Qwen2 model, hidden {args.hidden}, {model_bytes / 2**20:.1f} MiB of weights; {args.rounds} rounds, 16 training episodes each")
    header = f"{'run':<12} {'round':>5} " + " ".join(f"{p.removesuffix('_seconds'):>8}" for p in PHASES) + f" {'written MiB':>12} {'kept MiB':>9}"
    print(header)
    means: dict[str, dict[str, float]] = {}
    for name in args.runs.split(","):
        rows = run(args.example, model, name, args.rounds, work / name)
        trained = [r for r in rows if r.get("status") == "trained"]
        for r in trained:
            print(f"{name:<12} {r['round']:>5} " + " ".join(f"{r[p]:>8.2f}" for p in PHASES)
                  + f" {r['checkpoint_bytes'] / 2**20:>12.2f} {r['kept_checkpoint_bytes'] / 2**20:>9.2f}")
        means[name] = {p: statistics.mean(r[p] for r in trained) for p in (*PHASES, "checkpoint_bytes")}
    print("\nmean of the training rounds, and its ratio to torch (full weights):")
    base = means.get("torch")
    for name, m in means.items():
        ratios = "  ".join(f"{p.removesuffix('_seconds')} x{m[p] / base[p]:.2f}" for p in PHASES if base and base[p] > 0)
        print(f"{name:<12} train {m['train_seconds']:.2f} s  save {m['checkpoint_seconds']:.2f} s  publish {m['publish_seconds']:.2f} s  "
              f"written {m['checkpoint_bytes'] / 2**20:.2f} MiB" + (f"   [{ratios}]" if base else ""))


if __name__ == "__main__":
    main()
