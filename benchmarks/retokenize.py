"""Benchmark: how often ids rebuilt from messages (``--retokenize``) differ from the ids the server sampled.

Runs the demo's round 0 (``tracerl demo --rounds 0``: the tiny policy served by ``tracerl
serve``, the demo agent captured by tracerl, so every call has its served token ids and its
messages) twice, with the demo's warm-started policy and with an untrained tiny model (whose
outputs are random bytes, the worst case for re-encoding text), builds each dataset, then
rebuilds each row's ids from its messages with the policy's tokenizer exactly as
``build-dataset --retokenize`` does, and compares:

- *prompt equal*: the rebuilt prompt ids are the served ones, token for token;
- *response equal*: the rebuilt response ids (rendered through the chat template as the server did (tool calls in its own form), text re-encoded + end-of-sequence where it cannot be) are the sampled ones;
- where they differ, how: a different length, or the same length with other tokens
  (the text decodes the same, the split into tokens does not).

    python benchmarks/retokenize.py                   # 64 held-out tasks, and the round's training samples
    python benchmarks/retokenize.py --spans DATA --model MODEL_FOLDER   # any captured data
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tracerl.pipeline import build_dataset, dataset_table
from tracerl.pipeline.retokenize import Retokenizer
from tracerl.trainer.tiny_model import build_tiny_model


def demo_round(out: Path, tasks: int, model: Path | None = None) -> tuple[Path, str]:
    """Spans of one demo round (held-out tasks, greedy, and training samples) and the policy's model folder."""
    command = [sys.executable, "-m", "tracerl", "demo", "--rounds", "0", "--eval-tasks", str(tasks), "--out", str(out)]
    subprocess.run(command + (["--model", str(model)] if model else []), check=True, capture_output=True)
    registry = json.loads((out / "policy" / "registry.json").read_text())
    return out / "rounds" / "000" / "data", registry["policies"][0]["checkpoint"]


def compare(spans: Path, model: str, work: Path) -> dict[str, float]:
    """Counts of rebuilt ids equal to / different from the served ones, and the time per call."""
    build_dataset(spans, work, advantage="none")
    rows = dataset_table(work).to_pylist()
    retokenizer = Retokenizer(model)
    started = time.perf_counter()
    rebuilt = [retokenizer.ids(r["input_messages"], r["output_messages"]) for r in rows]
    found = dict.fromkeys(LABELS, 0) | {"calls": len(rows), "µs per call": (time.perf_counter() - started) / max(len(rows), 1) * 1e6}
    for row, ids in zip(rows, rebuilt, strict=True):
        if ids is None:
            found["not rebuildable (messages missing)"] += 1
            continue
        prompt, response = ids
        found["prompt equal"] += prompt == row["prompt_token_ids"]
        if response == row["response_token_ids"]:
            found["response equal"] += 1
        elif len(response) != len(row["response_token_ids"]):
            found["response of another length"] += 1
        else:
            found["response of the same length, other tokens"] += 1
    return found


LABELS = ("prompt equal", "response equal", "response of another length", "response of the same length, other tokens",
          "not rebuildable (messages missing)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64, help="held-out tasks of each demo round")
    parser.add_argument("--spans", type=Path, help="captured data to use instead of the demo rounds")
    parser.add_argument("--model", help="the policy's model folder (with --spans)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tracerl-retokenize-"))
    if args.spans:
        cases = {"given data": (args.spans, args.model)}
    else:
        print(f"running the demo's round 0 on {args.tasks} held-out tasks, twice, in {work} ...", flush=True)
        untrained = build_tiny_model(work / "untrained", seed=1)
        cases = {"demo policy (warm-started)": demo_round(work / "demo", args.tasks),
                 "untrained tiny model": demo_round(work / "untrained-demo", args.tasks, untrained)}
    results = {name: compare(spans, model, work / f"ds-{i}") for i, (name, (spans, model)) in enumerate(cases.items())}
    print("\nrebuilt from the messages (--retokenize) vs the ids the server sampled (captured by tracerl):\n")
    print("| | " + " | ".join(results) + " |\n|---|" + "---:|" * len(results))
    print("| calls | " + " | ".join(str(r["calls"]) for r in results.values()) + " |")
    for label in LABELS:
        print(f"| {label} | " + " | ".join(f"{r[label]} ({r[label] / max(r['calls'], 1):.1%})" for r in results.values()) + " |")
    print("| µs per call to rebuild | " + " | ".join(f"{r['µs per call']:.0f}" for r in results.values()) + " |")


if __name__ == "__main__":
    main()
