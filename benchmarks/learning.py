"""Does the loop teach the skill? Held-out reward of RL next to its control, over several seeds.

For one recipe (``tracerl demo``'s or an ``examples/`` agent's) and one setup (the recipe's
tiny model, or a real pretrained model), every seed runs:

- ``rl``: the loop;
- ``shuffled``: the same loop with each round's training-episode rewards permuted among its
  episodes (``--shuffle-rewards``): the same tasks, samples, number of updates and format
  replay, no signal. What it gains is what the loop teaches without the reward.

Round 0 of each run is the starting policy without RL. The claim printed at the end is the
bar: held-out reward rises in every seed, the mean rise is at least ``RISE`` absolute and at
least twice the control's. The raw per-round rows of every run go to ``--results`` (committed
under ``benchmarks/results/``) with the commit they ran on.

    python benchmarks/learning.py                                          # the demo, seeds 0 1 2
    python benchmarks/learning.py --recipe examples.calc.recipe:RECIPE --parallel 2
    python benchmarks/learning.py --recipe examples.calc.recipe:RECIPE --setup smollm2 --rounds 2
    python benchmarks/learning.py --recipe examples.sql.recipe:RECIPE --setup smollm2 --rounds 5 \
        --agent-args="--partial-credit --max-rewrites 0" --set temperature=0.6 tasks_per_round=16 eval_tasks=28 train.minibatch_size=16
    python benchmarks/learning.py --from benchmarks/results/gpu-loop-h100-2026-11-27   # the tables of committed runs
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from loop_runs import Variant, load_recipe, mean_spread, per_round_table, plot_curves, provenance, run_all

from tracerl.schemas.run_metrics import upgraded

RISE = 0.10  # absolute, on the primary held-out measure, mean over seeds
STDS = 2.0  # the mean rise must be at least this many sample standard deviations of the seeds' rises
OVER_CONTROL = 2.0  # the rise must be at least this many times the control's
SKILL_FILE = "held-out-skill.json"  # beside committed rows: {"VARIANT-seedN": [per round {what, shown, episodes}]}
PRIMARY_FILE = "held-out-primary.json"  # beside committed rows, for a recipe with a primary measure: {"VARIANT-seedN": [per round share]}
VARIANTS = {"rl": Variant("rl"), "shuffled": Variant("shuffled", changes={"shuffle_rewards": True})}


def smollm2_setup() -> Variant:
    """SmolLM2-135M-Instruct from its PyPI GGUF, served by the CPU vLLM and trained by the OpenRLHF backend.

    Sized for 2 CPU cores, where a forward and backward pass of this model runs at ~120 tokens/s
    and a prompt (system turn with the tool, four worked examples, the question) is ~530 tokens:
    8 tasks x 4 samples a round, 32 held-out tasks, 4 optimizer steps a round (minibatch 8) at
    2e-5, two threads (vLLM is idle while the trainer runs). The 1e-6 default for 0.5-7B models
    would need hundreds of steps.
    """
    from tracerl.trainer.from_gguf import gguf_folder

    folder = gguf_folder(chat_template="hermes").path
    return Variant("smollm2", changes={"model": str(folder), "server": "vllm", "backend": "torch", "tasks_per_round": 8,
                                       "group_size": 4, "eval_tasks": 32, "concurrency": 16, "max_tokens": 40},
                   train_changes={"learning_rate": 2e-5, "minibatch_size": 8, "micro_batch_size": 4, "epochs": 1, "num_threads": 2})


SETUPS = {"tiny": lambda: Variant("tiny"), "smollm2": smollm2_setup}


def with_settings(setup: Variant, settings: list[str]) -> Variant:
    """``setup`` with ``--set FIELD=VALUE`` changes: loop fields, or ``train.FIELD`` for the trainer's."""
    from dataclasses import fields

    from tracerl.orchestration.local.config import LocalConfig
    from tracerl.trainer.training.config import TrainConfig

    changes, train_changes = dict(setup.changes), dict(setup.train_changes)
    known = {"": {f.name for f in fields(LocalConfig)} - {"train", "seed", "out", "rounds"}, "train.": {f.name for f in fields(TrainConfig)}}
    for setting in settings:
        field, sep, text = setting.partition("=")
        if not sep or not field:
            raise SystemExit(f"--set {setting!r}: write FIELD=VALUE (e.g. temperature=0.6 or train.minibatch_size=16)")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        prefix = "train." if field.startswith("train.") else ""
        name = field.removeprefix(prefix)
        if name not in known[prefix]:
            raise SystemExit(f"--set {setting!r}: no {'trainer' if prefix else 'loop'} field {name!r}; one of {', '.join(sorted(known[prefix]))}")
        (train_changes if prefix else changes)[name] = value
    return replace(setup, changes=changes, train_changes=train_changes)


def held_out_skill(recipe, run_dir: Path, rounds: int) -> list[dict]:
    """Per round, held-out episodes that show the recipe's skill (``AgentRecipe.held_out_skill``; without
    one: that called a tool), from the round's spans."""
    from tracerl.pipeline.source import raw_spans_of

    counts = []
    for rnd in range(rounds):
        spans = run_dir / "rounds" / f"{rnd:03d}" / "data" / "spans"
        if recipe.held_out_skill is not None:
            count = recipe.held_out_skill(spans)
            counts.append({"what": count.what, "shown": count.shown, "episodes": count.episodes})
            continue
        with raw_spans_of(spans) as con:
            (episodes, called), = con.sql("""
                SELECT count(DISTINCT episode_id), count(DISTINCT episode_id) FILTER (name LIKE 'execute_tool %')
                FROM raw_spans WHERE split = 'test'
            """).fetchall()
        counts.append({"what": "called a tool", "shown": called, "episodes": episodes})
    return counts


def primary_measure(recipe, run_dir: Path, rounds: int) -> list[float]:
    """Per round, the recipe's primary held-out measure (``AgentRecipe.held_out_primary``) as a share of its episodes."""
    counts = [recipe.held_out_primary(run_dir / "rounds" / f"{rnd:03d}" / "data" / "spans") for rnd in range(rounds)]
    return [count.shown / count.episodes if count.episodes else 0.0 for count in counts]


def _skill_cell(run: dict) -> str:
    """``first->last/episodes`` of a run's held-out skill counts ("" for committed rows without them)."""
    if not run.get("held_out_skill"):
        return ""
    first, last = run["held_out_skill"][0], run["held_out_skill"][-1]
    return f"{first['shown']}->{last['shown']}/{first['episodes']}"


def committed_results(path: Path) -> list[dict]:
    """Runs as ``run_all`` returns them, from what a run left: a ``--results`` JSON, or a folder of
    ``VARIANT-seedN-metrics.jsonl`` (the loop's own rows, as ``gpu_loop.sh`` copies them back; rows of older runs
    read in today's field names)."""
    if path.is_file():
        return json.loads(path.read_text())["runs"]
    skills_file, primary_file = path / SKILL_FILE, path / PRIMARY_FILE
    skills = json.loads(skills_file.read_text()) if skills_file.exists() else {}
    primary = json.loads(primary_file.read_text()) if primary_file.exists() else {}
    rows = {metrics.name.removesuffix("-metrics.jsonl"): [upgraded(json.loads(line)) for line in metrics.read_text().splitlines()]
            for metrics in sorted(path.glob("*-seed*-metrics.jsonl"))}
    # runs bounded by time (gpu_loop.sh) end at different rounds: compare the rounds every run reached
    common = min(map(len, rows.values()), default=0)
    runs = []
    for run, kept in rows.items():
        variant, _, seed = run.rpartition("-seed")
        kept = kept[:common]
        reward = [r["eval_mean_reward"] for r in kept]
        measured = {"held_out": primary[run][:common], "held_out_reward": reward} if run in primary else {"held_out": reward}
        runs.append({"variant": variant, "seed": int(seed), "seconds": round(sum(r["seconds"] for r in kept), 1), **measured, "rows": kept,
                     "held_out_skill": skills.get(run, [])[:common]})
    return runs


def count_skills(recipe, runs_dir: Path, folder: Path) -> None:
    """Write ``folder/held-out-skill.json`` (and, for a recipe with a primary measure, ``held-out-primary.json``):
    per round of each run whose rows ``folder`` holds, counted from the spans of its run folder in ``runs_dir``."""
    skills, primary = {}, {}
    for metrics in sorted(folder.glob("*-seed*-metrics.jsonl")):
        run = metrics.name.removesuffix("-metrics.jsonl")
        rounds = len(metrics.read_text().splitlines())
        skills[run] = held_out_skill(recipe, runs_dir / run, rounds)
        if recipe.held_out_primary is not None:
            primary[run] = primary_measure(recipe, runs_dir / run, rounds)
    (folder / SKILL_FILE).write_text(json.dumps(skills, indent=1))
    if primary:
        (folder / PRIMARY_FILE).write_text(json.dumps(primary, indent=1))


def _skill_what(results: list[dict]) -> str:
    counted = next((r["held_out_skill"][0]["what"] for r in results if r.get("held_out_skill")), None)
    return counted or "called a tool"


def measure_name(recipe, results: list[dict]) -> str:
    """What the tables measure: the recipe's primary measure where the runs counted it, else the held-out reward."""
    primary = recipe.held_out_primary is not None and bool(results) and all("held_out_reward" in r for r in results)
    return "primary measure (share of held-out episodes, the recipe's held_out_primary)" if primary else "reward"


def summary(results: list[dict], variants: list[Variant], measure: str = "reward") -> str:
    """The per-round table, the rise table and the verdict against the bar, as printed."""
    lines = ["", f"held-out {measure} per round, mean ± sample std over seeds:", "", per_round_table(results, variants), "",
             f"| variant | round 0 (no RL) | last round | rise | seeds rising | held-out episodes that {_skill_what(results)}, round 0 -> last | seconds per run (max) |",
             "|---|---|---|---|---|---|---|"]
    rises = {}
    for v in variants:
        runs = [r for r in results if r["variant"] == v.name]
        rises[v.name] = [r["held_out"][-1] - r["held_out"][0] for r in runs]
        calls = [cell for cell in map(_skill_cell, runs) if cell]
        lines.append(f"| {v.name} | {mean_spread([r['held_out'][0] for r in runs])} | {mean_spread([r['held_out'][-1] for r in runs])} "
                     f"| {statistics.fmean(rises[v.name]):+.2f} | {sum(x > 0 for x in rises[v.name])}/{len(runs)} | {', '.join(calls) or '-'} "
                     f"| {max(r['seconds'] for r in runs):.0f} |")
    if "rl" in rises:
        rl = statistics.fmean(rises["rl"])
        spread = statistics.stdev(rises["rl"]) if len(rises["rl"]) > 1 else float("inf")
        # a claim needs its control: without a shuffled run the bar is missed, whatever the rises
        control = statistics.fmean(rises["shuffled"]) if "shuffled" in rises else None
        # each part of the bar with its figures to three places, so a miss by a hair reads as one (+0.099 < 0.10)
        checks = {
            f"mean rise {rl:+.3f} >= {RISE:.2f}": rl >= RISE,
            f"seeds' rises {', '.join(f'{x:+.3f}' for x in rises['rl'])} all > 0": all(x > 0 for x in rises["rl"]),
            f"mean >= {STDS:g} x their sample std {spread:.3f}": rl >= STDS * spread,
            (f"control {control:+.3f}: rl >= {OVER_CONTROL:g}x" if control is not None else "no control run"):
                control is not None and rl >= OVER_CONTROL * max(control, 0.0),
        }
        lines.append("\nrl: " + "; ".join(f"{name} {'yes' if held else 'NO'}" for name, held in checks.items())
                     + f" -> {'MEETS' if all(checks.values()) else 'MISSES'} the bar")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="tracerl.orchestration.demo.recipe:DEMO", help="module:NAME of an AgentRecipe")
    parser.add_argument("--setup", choices=sorted(SETUPS), default="tiny", help="tiny: the recipe's own model; smollm2: SmolLM2-135M-Instruct on vLLM")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["rl", "shuffled"],
                        help="rl: the loop; shuffled: the same with rewards permuted (each seed's run is reproducible, so variants may run apart)")
    parser.add_argument("--agent-args", default="", help="more arguments of the agent program, quoted as one (sql: --partial-credit)")
    parser.add_argument("--set", dest="settings", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="change the setup: a loop field (temperature=0.6, tasks_per_round=16) or train.FIELD (train.minibatch_size=16); "
                             "VALUE read as JSON, else as text")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (each trains on one thread)")
    parser.add_argument("--out", type=Path, default=None, help="the runs' folders (default: a temporary folder)")
    parser.add_argument("--results", type=Path, default=None, help="raw per-round rows of every run, as JSON (default: OUT/raw.json)")
    parser.add_argument("--from", dest="committed", type=Path, default=None,
                        help="print the tables of runs already made (a --results file, or a folder of VARIANT-seedN-metrics.jsonl) instead of running")
    parser.add_argument("--skill-of", type=Path, default=None,
                        help="with --from FOLDER: the runs' own folders (VARIANT-seedN/); count each round's held-out skill from their spans into FOLDER/" + SKILL_FILE)
    args = parser.parse_args()
    if args.committed:
        recipe = load_recipe(args.recipe)
        if args.skill_of:
            count_skills(recipe, args.skill_of, args.committed)
        results = committed_results(args.committed)
        variants = [VARIANTS[name] for name in args.variants if any(r["variant"] == name for r in results)]
        measure = measure_name(recipe, results)
        print(summary(results, variants, measure))
        folder = args.committed if args.committed.is_dir() else args.committed.parent
        plot = folder / (f"{args.committed.stem}.png" if args.committed.is_file() else "learning.png")
        plot_curves(results, variants, plot, f"{recipe.title}: held-out {measure}", f"held-out {measure.split(' (')[0]} (greedy)")
        print(f"curves: {plot}")
        return

    recipe = load_recipe(args.recipe)
    setup = SETUPS[args.setup]()
    if args.agent_args:
        setup = replace(setup, changes={**setup.changes, "agent_args": tuple(shlex.split(args.agent_args))})
    setup = with_settings(setup, args.settings)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"tracerl-learning-{recipe.name}-"))
    out.mkdir(parents=True, exist_ok=True)
    variants = [VARIANTS[name] for name in args.variants]
    print(f"{recipe.title}, setup {args.setup}: seeds {args.seeds}, variants {[v.name for v in variants]}, runs in {out}", flush=True)
    started = time.time()
    results = run_all(args.recipe, variants, args.seeds, out, args.rounds, args.parallel, setup)
    for result in results:
        run_dir = out / f"{result['variant']}-seed{result['seed']}"
        result["held_out_skill"] = held_out_skill(recipe, run_dir, len(result["held_out"]))
        if recipe.held_out_primary is not None:  # the claim rests on it: the held-out reward is kept beside it
            result["held_out_reward"], result["held_out"] = result["held_out"], primary_measure(recipe, run_dir, len(result["held_out"]))
    raw = {"recipe": args.recipe, "setup": {"name": args.setup, **setup.changes, "train": setup.train_changes}, **provenance(),
           "runs": results}
    results_path = args.results or out / "raw.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(raw, indent=1, default=str))

    print(summary(results, variants, measure_name(recipe, results)))
    measure = measure_name(recipe, results)
    plot_curves(results, variants, out / "learning.png", f"{recipe.title} ({args.setup}): held-out {measure}", f"held-out {measure.split(' (')[0]} (greedy)")
    print(f"curves: {out / 'learning.png'}   raw rows: {results_path}   total {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
