"""What taking a model away costs and what it gives, and what the experiment trackers add to a round.

1. ``tracerl model to-gguf`` on SmolLM2-135M-Instruct (the folder ``tracerl model from-gguf --chat-template
   hermes`` makes, float32 safetensors), per format (f16, q8_0): export seconds (writing the file and its
   read-back check by transformers), the file's size and its ratio to the folder's safetensors; then the file in
   llama.cpp (its prebuilt CPU binaries, ``testing/llama_cpp_node/generate.mjs``): load seconds and greedy
   generation tokens/s on a fixed chat prompt, beside transformers on the folder (float32, the same prompt, the
   same threads: the baseline) as a ratio; and how llama.cpp reads it (``tracerl_testing.llama_cpp``): its greedy
   continuation against transformers' (tokens equal up to the first that differs, "64/64") and the max/mean
   absolute gap of the log-probs both give the prompt's tokens.
2. ``--report-to tensorboard,mlflow,wandb,trackio``: the tiny demo loop (the tiny local model, as
   tests/orchestration/local/test_trackers.py runs it) once without trackers and once with all four, every store
   local in a temporary folder (MLflow's file store, W&B offline, Trackio's folder), each run in a fresh process,
   the two alternated (``--loop-runs``, averaged): seconds to round 0 (opening the trackers), each round's wall
   seconds and the difference, and the part of a round outside its metrics row's phases (the loop logs to the
   trackers after the row is timed, so that is where they land).

    .venv/bin/python benchmarks/model_export.py                      # ~5-6 min on 2 cores
    .venv/bin/python benchmarks/model_export.py --quick              # 1 round, 1 loop run, 1 repeat, 32 tokens
    .venv/bin/python benchmarks/model_export.py --model DIR --skip-trackers

Needs llama.cpp's binaries (``npm ci --prefix testing/llama_cpp_node --ignore-scripts --omit=optional``) and the
trackers (``pip install -e '.[trackers]'``). Progress goes to stderr, the tables to stdout. Run it on a quiet
machine: the figures are per core and every part shares them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

TYPES = ("f16", "q8_0")
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
TRACKERS = ("tensorboard", "mlflow", "wandb", "trackio")
PHASES = ("rollout", "build", "train", "checkpoint", "publish")
ROUND_STARTS = "running the agent"  # the loop's first phase of every round (tracerl.orchestration.local.run)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- 1. the exported file ----


@dataclass(frozen=True)
class Generation:
    """One engine's greedy generation of the prompt: the best of the repeats."""

    load_seconds: float
    seconds: float  # prompt in to the last new token out
    tokens: list[int]

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds


def safetensors_bytes(folder: Path) -> int:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{folder}: no *.safetensors file (pass a Hugging Face model folder as --model)")
    return sum(f.stat().st_size for f in files)


def transformers_reading(folder: Path, prompt: list[int], new_tokens: int, threads: int, repeats: int) -> tuple[Generation, list[float]]:
    """The baseline: the folder under transformers in float32 on ``threads`` threads, a plain greedy loop over its
    KV cache (never stopping at an end token, as the llama.cpp side does not), after one untimed run; and the log-prob
    of each prompt token after its prefix."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    began = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    load_seconds = time.perf_counter() - began

    def generate() -> tuple[float, list[int]]:
        began = time.perf_counter()
        out = model(torch.tensor([prompt]), use_cache=True)
        tokens = []
        while True:
            tokens.append(int(out.logits[0, -1].argmax()))
            if len(tokens) == new_tokens:
                return time.perf_counter() - began, tokens
            out = model(torch.tensor([[tokens[-1]]]), cache=out.cache, use_cache=True)

    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt])).logits[0], dim=-1)
        prompt_logprobs = [float(logprobs[i, token]) for i, token in enumerate(prompt[1:])]
        generate()  # untimed, as on llama.cpp's side: the first run warms torch's allocator
        best = min((generate() for _ in range(repeats)), key=lambda run: run[0])
    return Generation(load_seconds, *best), prompt_logprobs


def llama_cpp_generation(gguf: Path, prompt: list[int], new_tokens: int, threads: int, repeats: int) -> tuple[Generation, str]:
    """llama.cpp's load seconds and greedy generation of the prompt (the best of ``repeats``), and its release."""
    from tracerl_testing.llama_cpp import INSTALL, NODE_FOLDER

    request = {"model": str(gguf), "prompt": prompt, "tokens": new_tokens, "threads": threads, "repeats": repeats}
    try:
        done = subprocess.run(["node", str(NODE_FOLDER / "generate.mjs")], input=json.dumps(request), capture_output=True,
                              text=True, timeout=600)
    except FileNotFoundError:
        raise SystemExit(f"node is not installed: llama.cpp runs through node-llama-cpp (Node 20+, then {INSTALL})") from None
    if done.returncode != 0:
        raise SystemExit(f"llama.cpp could not run {gguf} (exit {done.returncode}; is it installed? {INSTALL}):\n{done.stderr[-3000:]}")
    answer = json.loads(done.stdout)
    run = min(answer["runs"], key=lambda r: r["seconds"])
    return Generation(answer["load_seconds"], run["seconds"], run["tokens"]), answer["llama_cpp"]["release"]


def equal_prefix(ours: list[int], theirs: list[int]) -> int:
    """How many tokens the two continuations share before the first that differs."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return min(len(ours), len(theirs))


def export_table(folder: Path, work: Path, new_tokens: int, threads: int, repeats: int) -> None:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from tracerl.trainer.to_gguf import export_gguf
    from tracerl_testing.llama_cpp import read_with_llama_cpp

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True,
                                           return_dict=True)["input_ids"]
    weights = safetensors_bytes(folder)
    say(f"transformers: {folder.name}, {len(prompt)} prompt tokens, {new_tokens} new, {threads} threads, best of {repeats}")
    baseline, prompt_logprobs = transformers_reading(folder, prompt, new_tokens, threads, repeats)
    rows = []
    release = "?"
    for qtype in TYPES:
        say(f"exporting {qtype}")
        done = export_gguf(folder, work / qtype / f"{folder.name[:40]}-{qtype}.gguf", qtype=qtype, force=True)
        say(f"llama.cpp: {done.path.name} ({done.bytes / 1e6:.1f} MB)")
        generation, release = llama_cpp_generation(done.path, prompt, new_tokens, threads, repeats)
        reading = read_with_llama_cpp(done.path, [], [prompt], new_tokens).runs[0]
        if reading.greedy != generation.tokens:
            say(f"note: {qtype}'s timed generation (llama.cpp's sampler at temperature 0) and its argmax continuation differ "
                f"after {equal_prefix(reading.greedy, generation.tokens)} tokens")
        gaps = [abs(a - b) for a, b in zip(reading.logprobs, prompt_logprobs, strict=True)]
        rows.append((qtype, done, generation, equal_prefix(reading.greedy, baseline.tokens), max(gaps), statistics.fmean(gaps)))

    import torch
    import transformers

    print(f"tracerl model to-gguf: {folder}")
    print(f"  safetensors {weights / 1e6:.1f} MB; prompt {len(prompt)} tokens (chat template), {new_tokens} new tokens greedy, "
          f"{threads} threads, best of {repeats}; llama.cpp {release}, transformers {transformers.__version__}, torch {torch.__version__}")
    print(f"{'engine / format':<22} | {'export s':>8} | {'size MB':>8} | {'x folder':>8} | {'load s':>6} | {'tok/s':>6} | "
          f"{'x transf.':>9} | {'greedy':>7} | |log-prob gap| max / mean")
    print(f"{'transformers (folder)':<22} | {'-':>8} | {weights / 1e6:>8.1f} | {1:>8.2f} | {baseline.load_seconds:>6.2f} | "
          f"{baseline.tokens_per_second:>6.1f} | {1:>8.2f}x | {'-':>7} | -")
    for qtype, done, generation, same, gap_max, gap_mean in rows:
        print(f"{'llama.cpp ' + qtype:<22} | {done.seconds:>8.1f} | {done.bytes / 1e6:>8.1f} | {done.bytes / weights:>8.2f} | "
              f"{generation.load_seconds:>6.2f} | {generation.tokens_per_second:>6.1f} | "
              f"{generation.tokens_per_second / baseline.tokens_per_second:>8.2f}x | {f'{same}/{new_tokens}':>7} | "
              f"{gap_max:.3g} / {gap_mean:.3g}")
    print("  export s: writing the file and transformers' read-back check; x folder: the file's size over the folder's "
          "safetensors; greedy: llama.cpp's argmax continuation equal to transformers' up to the first token that differs; "
          f"log-prob gap: over the prompt's {len(prompt) - 1} tokens after the first, in nats")


# ---- 2. what the trackers add to a round ----


def loop_timings(report_to: tuple[str, ...], model: str, rounds: int, folder: str) -> dict:
    """The tiny demo loop reporting to ``report_to``, run in this (fresh) process with every tracker's store under
    ``folder``: its metrics rows, when each round began, when the run began and ended (``time.monotonic``)."""
    os.dup2(2, 1)  # the trackers print; stdout is the parent's table
    sys.stdout = sys.stderr
    from tracerl.orchestration.demo.recipe import DEMO
    from tracerl.orchestration.local.config import LocalConfig
    from tracerl.orchestration.local.run import run_local
    from tracerl.trainer.training.config import TrainConfig
    from tracerl_testing.trackers import tracker_env

    os.environ.update(tracker_env(Path(folder)))
    starts: dict[int, float] = {}

    def on_phase(rnd: int, text: str) -> None:
        if text == ROUND_STARTS:
            starts.setdefault(rnd, time.monotonic())
        elif text.startswith("warning"):
            say(f"  {text}")

    cfg = LocalConfig(out=Path(folder) / "run", rounds=rounds, tasks_per_round=4, group_size=2, eval_tasks=3, seed=0, model=model,
                      train=TrainConfig(epochs=1, minibatch_size=8, report_to=report_to))
    began = time.monotonic()
    rows = run_local(DEMO, cfg, on_phase=on_phase)
    return {"rows": rows, "began": began, "ended": time.monotonic(), "starts": starts}


@dataclass(frozen=True)
class LoopTimes:
    opening: float  # the run's start to round 0's first phase: the policy server, the trainer, the trackers' start
    walls: list[float]  # each round's first phase to the next round's; the last one's to the run's end (closing included)
    phases: list[float]  # each round's metrics row's seconds: its phases' sum
    by_phase: dict[str, float]  # each phase's mean over the rounds that have it

    @classmethod
    def of(cls, timings: dict) -> LoopTimes:
        starts = [timings["starts"][rnd] for rnd in sorted(timings["starts"])]
        rows = timings["rows"]
        by_phase = {name: statistics.fmean(r[f"{name}_seconds"] for r in rows if f"{name}_seconds" in r)
                    for name in PHASES if any(f"{name}_seconds" in r for r in rows)}
        return cls(starts[0] - timings["began"], [b - a for a, b in zip(starts, [*starts[1:], timings["ended"]])],
                   [r["seconds"] for r in rows], by_phase)

    @classmethod
    def mean(cls, runs: list[LoopTimes]) -> LoopTimes:
        return cls(statistics.fmean(r.opening for r in runs), [statistics.fmean(w) for w in zip(*(r.walls for r in runs))],
                   [statistics.fmean(p) for p in zip(*(r.phases for r in runs))],
                   {name: statistics.fmean(r.by_phase[name] for r in runs) for name in runs[0].by_phase})


def tracker_table(rounds: int, runs: int, work: Path) -> None:
    from tracerl.trainer.tiny_model import build_tiny_model

    model = str(build_tiny_model(work / "start", seed=1))
    measured: dict[str, list[LoopTimes]] = {"none": [], "trackers": []}
    spawn = multiprocessing.get_context("spawn")  # each run in a fresh process: none finds another's imports warm
    for run in range(runs):  # alternated, so that neither variant always runs on a colder disk cache
        for label, report_to in (("none", ()), ("trackers", TRACKERS)):
            say(f"the tiny demo loop, {rounds} round(s), --report-to {','.join(report_to) or 'none'} (run {run + 1} of {runs})")
            with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                timings = pool.submit(loop_timings, report_to, model, rounds, str(work / f"{label}-{run}")).result()
            measured[label].append(LoopTimes.of(timings))
    none, trackers = LoopTimes.mean(measured["none"]), LoopTimes.mean(measured["trackers"])

    def line(name: str, a: float, b: float, extra: str = "") -> None:
        print(f"{name:<30} | {a:>7.2f} | {b:>8.2f} | {b - a:>+7.2f}{extra}")

    print()
    print(f"Trackers: the tiny demo loop (4 tasks x 2 samples, 3 held out), round 0 + {rounds}, without and with "
          f"--report-to {','.join(TRACKERS)} (stores local, offline); mean of {runs} run(s) each, alternated")
    print(f"{'seconds':<30} | {'none':>7} | {'trackers':>8} | {'added':>7} | outside the row's phases: none, trackers, added")
    line("opening (to round 0)", none.opening, trackers.opening)
    last = len(none.walls) - 1
    for rnd in range(last + 1):
        outside_none, outside_trackers = none.walls[rnd] - none.phases[rnd], trackers.walls[rnd] - trackers.phases[rnd]
        line(f"round {rnd}" + (" + closing" if rnd == last else ""), none.walls[rnd], trackers.walls[rnd],
             f" | {outside_none:.2f}, {outside_trackers:.2f}, {outside_trackers - outside_none:+.2f}")
    for name in none.by_phase:
        line(f"  {name} (mean of rounds)", none.by_phase[name], trackers.by_phase.get(name, float("nan")))
    print("  a round: its first phase to the next round's (the last: to the run's end, the trackers' finish and the "
          "policy server's stop included); outside the row's phases: that minus the metrics row's seconds, where the "
          "loop's logging to the trackers (row, reward curve image) lands")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="the Hugging Face folder to export (default: SmolLM2-135M-Instruct, "
                        "the folder `tracerl model from-gguf --chat-template hermes` makes and caches)")
    parser.add_argument("--skip-trackers", action="store_true", help="measure the export only")
    parser.add_argument("--skip-export", action="store_true", help="measure the trackers only")
    parser.add_argument("--rounds", type=int, default=2, help="training rounds after round 0 in the trackers' loop (default 2)")
    parser.add_argument("--loop-runs", type=int, default=2, help="runs of the loop with and without trackers, alternated (default 2)")
    parser.add_argument("--new-tokens", type=int, default=64, help="greedy tokens generated (default 64)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp's and torch's threads (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="generations timed per engine, the best kept (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 round, 1 loop run, 1 repeat, 32 new tokens: a check that it runs")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.loop_runs, args.repeats, args.new_tokens = 1, 1, 1, 32
    for name in ("rounds", "loop_runs", "new_tokens", "threads", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    if args.model is not None and not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: not a Hugging Face model folder (no config.json)")
    began = time.monotonic()
    say(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="tracerl-model-export-") as scratch:
        work = Path(scratch)
        if not args.skip_export:
            if args.model is None:
                from tracerl.trainer.from_gguf import gguf_folder

                say("SmolLM2-135M-Instruct: tracerl model from-gguf --chat-template hermes (cached after the first time)")
                args.model = gguf_folder(chat_template="hermes").path
            export_table(args.model.resolve(), work / "export", args.new_tokens, args.threads, args.repeats)
        if not args.skip_trackers:
            tracker_table(args.rounds, args.loop_runs, work / "trackers")
    say(f"done in {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
