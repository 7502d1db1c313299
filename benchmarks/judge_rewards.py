"""Can the loop learn from a judge instead of gold answers? An example trained both ways, several seeds.

- ``gold``: the recipe as it is, trained on the agent's own reward.
- ``judge``: the same loop with ``--judge-url``: each round's training episodes are scored by
  ``tracerl pipeline judge`` and only those scores are trained on. The judge is scripted (a loopback
  OpenAI-compatible server that reads the prompt as a model would) and never sees the gold answer:

  - ``--example calc``: it knows the arithmetic, so it works out each story's true result from its
    phrase and numbers, and scores a trajectory 1 when its calculator call gives that result, 0.2
    when it calls the calculator on the story's numbers with another operation, 0 otherwise.
  - ``--example rag``: it checks the answer against the paragraphs the agent retrieved, as a
    grounding judge does: 1 when the answer is the asked fact of the paragraph of the founder that
    the question's company paragraph names (both hops retrieved), 0.5 when the first hop (the
    company's paragraph) was retrieved but the answer is not that fact, 0.1 for any other
    well-formed answer, 0 for none.

The held-out reward of both is the agent's own (gold) reward, measured the same way.

    python benchmarks/judge_rewards.py --parallel 2                   # calc, seeds 0 1 2, both variants
    python benchmarks/judge_rewards.py --example rag --parallel 2
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from loop_runs import REPO, Variant, mean_spread, per_round_table, run_all  # noqa: F401 (REPO: examples importable)

from examples.calc.task import PHRASES, CalculatorError, calculator, story_numbers
from examples.rag.task import ANSWER_CLOSE, ANSWER_OPEN, normalize_answer
from tracerl_testing.judges import Scorer, scripted_judge
from tracerl_testing.scripted_server import running_scripted_server
_EXPRESSION = re.compile(r'expression\\?"\s*:\s*\\?"(.*?)\\?"')
_PATTERNS = {
    op: [re.compile(re.escape(t).replace(r"\{a\}", r"(\d+)").replace(r"\{b\}", r"(\d+)")
                    .replace(r"\{name\}", r"\w+").replace(r"\{item\}", r"\w+")) for t in templates]
    for op, templates in PHRASES.items()
}


def true_result(question: str) -> str | None:
    """The story's result, worked out from its phrase (which names the operation) and its numbers."""
    for op, patterns in _PATTERNS.items():
        for pattern in patterns:
            match = pattern.search(question)
            if match:
                return calculator(f"{match.group(1)} {op} {match.group(2)}")
    return None


def calc_score(context: str, trajectory: str) -> float:
    """The scripted judge's rubric for one trajectory of a calc task."""
    truth = true_result(context or trajectory)
    calls = _EXPRESSION.findall(trajectory)
    if truth is None or not calls:
        return 0.0
    try:
        result = calculator(calls[-1])
    except CalculatorError:
        return 0.0
    if result == truth:
        return 1.0
    numbers = story_numbers(context or trajectory)
    return 0.2 if sorted(story_numbers(calls[-1])) == sorted(numbers[:2]) else 0.0


_QUESTION = re.compile(r"founder of (.+?) (born|attend)")
_ANSWERS = re.compile(re.escape(ANSWER_OPEN) + r"(.*?)" + re.escape(ANSWER_CLOSE), re.DOTALL)


def rag_score(context: str, trajectory: str) -> float:
    """The scripted grounding judge of a rag task: the answer against the paragraphs retrieved."""
    text = f"{context}\n{trajectory}"
    question, answers = _QUESTION.search(text), _ANSWERS.findall(trajectory)
    if not answers or question is None:
        return 0.0
    org, asks = question.group(1), question.group(2)
    first_hop = re.search(re.escape(org) + r" is a \w+ company founded in \d+ by (\w+ \w+)\.", text)
    if first_hop is None:
        return 0.1
    founder = re.escape(first_hop.group(1))
    second_hop = re.search(founder + r" is a \w+ born in (\w+)\. " + founder + r" studied at (\w+ University)\.", text)
    fact = second_hop and second_hop.group(1 if asks == "born" else 2)
    return 1.0 if fact and normalize_answer(answers[-1]) == normalize_answer(fact) else 0.5


EXAMPLES: dict[str, tuple[str, Scorer]] = {
    "calc": ("examples.calc.recipe:RECIPE", calc_score),
    "rag": ("examples.rag.recipe:RECIPE", rag_score),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", choices=sorted(EXAMPLES), default="calc")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--variants", nargs="+", choices=["gold", "judge"], default=["gold", "judge"])
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    recipe, score = EXAMPLES[args.example]
    out = args.out or Path(tempfile.mkdtemp(prefix="tracerl-judge-rewards-"))
    out.mkdir(parents=True, exist_ok=True)
    with running_scripted_server(scripted_judge(score)) as judge:
        variants = {"gold": Variant("gold"), "judge": Variant("judge", changes={"judge_url": judge.base_url, "judge_model": f"{args.example}-judge"})}
        chosen = [variants[name] for name in args.variants]
        print(f"{args.example}, gold rewards vs a scripted judge's: seeds {args.seeds}, runs in {out}", flush=True)
        started = time.time()
        results = run_all(recipe, chosen, args.seeds, out, args.rounds, args.parallel)
        calls = len(judge.calls)
    print("\nheld-out reward (gold, greedy) per round, mean ± std over seeds:\n")
    print(per_round_table(results, chosen))
    print("\n| variant | round 0 | last round | seeds rising | seconds per run (max) |\n|---|---|---|---|---|")
    for v in chosen:
        runs = [r for r in results if r["variant"] == v.name]
        rising = sum(r["held_out"][-1] > r["held_out"][0] for r in runs)
        print(f"| {v.name} | {mean_spread([r['held_out'][0] for r in runs])} | {mean_spread([r['held_out'][-1] for r in runs])} "
              f"| {rising}/{len(runs)} | {max(r['seconds'] for r in runs):.0f} |")
    print(f"\njudge calls: {calls}; total {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
