"""TRL's side of ``beside_trl.py``: ``GRPOTrainer`` with the calculator as a tool, on the calc agent's tasks.

Runs in TRL's own venv (``.venv-trl``, built by ``.ci/run``; no tracerl there), the way a
user who picks TRL instead would run it: the agent loop inside the trainer's process,
TRL's own generation (transformers on CPU), ``tools=[calculator]`` rendered in the prompt and
parsed out of the completions by TRL, and the calc agent's reward: the calculator's result of
the call is the answer (``examples.calc.agent.final_answer``), scored by ``examples.calc.task.reward``.

``--tool-turns`` is TRL's ``max_tool_calling_iterations``. The calc agent makes one LLM call
(the call; the tool's result is its answer), so the benchmark's default is 0: TRL generates
and trains on that call alone, as tracerl does. With 1, TRL runs the tool and generates a
second turn after its result (what TRL's tool loop does by default), trained as one
concatenated sequence with the result masked, and that turn is the answer (the calc agent's
``--reflect-on-tool-use``).

Input: ``--steps-file``, one JSON line per step with the step's training tasks, as the
tracerl loop draws them for the same seed (the driver writes it). Output, in ``--out``:
``step-N/`` (the policy after N optimizer steps, ``step-0`` the start) and ``rows.jsonl``,
one row per step: where the wall seconds went (generation with the tool calls, data
preparation: rewards and advantages, training: forward, backward, optimizer), the tokens
generated and trained, the mean training reward and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from examples.calc import task as calc  # noqa: E402  (the repository root, as the examples run)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression of numbers, + - * / and parentheses, such as '7 + 3'.

    Args:
        expression: the arithmetic expression to evaluate
    """
    # TRL builds the tool's schema from a Google-style docstring (the calc agent's own has no Args section)
    return calc.calculator(expression)


def prompt_messages(question: str, examples: int) -> list[dict]:
    """The calc agent's conversation before its first call: system turn, ``examples`` solved problems, the question."""
    messages = [{"role": "system", "content": calc.SYSTEM_PROMPT}]
    for question_, expression in calc.EXAMPLES[:examples]:
        call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}
        messages += [{"role": "user", "content": question_}, {"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "name": "calculator", "content": calc.calculator(expression)}]
    return messages + [{"role": "user", "content": question}]


def agent_answer(turn: dict) -> str:
    """What the calc agent answers for this turn: its calls' results (AutoGen joins them by lines), no answer when
    the calculator refuses one; the text when it called nothing."""
    calls = turn.get("tool_calls") or []
    if not calls:
        return turn.get("content") or ""
    if any(call["function"]["name"] != "calculator" for call in calls):
        return ""
    try:
        return "\n".join(calc.calculator(**call["function"]["arguments"]) for call in calls)
    except (calc.CalculatorError, TypeError):
        return ""


class StepClock(TrainerCallback):
    """Per optimizer step: wall seconds split into generation, data preparation and training; tokens; reward; RSS."""

    def __init__(self, out: Path, rows_path: Path):
        self.out, self.rows_path = out, rows_path
        self.trainer: GRPOTrainer | None = None
        self.reset()

    def reset(self) -> None:
        self.generate = self.score = 0.0
        self.generated_tokens = self.trained_tokens = 0
        self.rewards: list[float] = []
        self.calls = 0  # episodes whose first turn called a tool (TRL counts the calls it runs only)

    def on_step_begin(self, args, state, control, **kwargs):
        self.reset()
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        wall = time.perf_counter() - self.started
        saved = time.perf_counter()
        self.trainer.save_model(str(self.out / f"step-{state.global_step}"))
        row = {
            "step": state.global_step, "episodes": len(self.rewards), "train_mean_reward": sum(self.rewards) / max(len(self.rewards), 1),
            "generation_seconds": round(self.generate, 2), "preparation_seconds": round(self.score - self.generate, 2),
            "train_seconds": round(wall - self.score, 2), "step_seconds": round(wall, 2), "save_seconds": round(time.perf_counter() - saved, 2),
            "generated_tokens": self.generated_tokens, "trained_tokens": self.trained_tokens,
            "episodes_calling_the_tool": self.calls,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        }
        with self.rows_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


class TimedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose generation and scoring are timed and counted (nothing else changes)."""

    clock: StepClock

    def _generate(self, prompts):
        started = time.perf_counter()
        out = super()._generate(prompts)
        self.clock.generate += time.perf_counter() - started
        prompt_ids, completion_ids, tool_mask = out[0], out[1], out[2]
        self.clock.generated_tokens += sum(map(sum, tool_mask)) if tool_mask is not None else sum(map(len, completion_ids))
        self.clock.trained_tokens += sum(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
        return out

    def _generate_and_score_completions(self, inputs):
        started = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        self.clock.score += time.perf_counter() - started
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="the policy folder (a chat template TRL knows, for tools=)")
    parser.add_argument("--steps-file", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--max-completion-length", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--examples", type=int, default=len(calc.EXAMPLES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tool-turns", type=int, default=0, help="max_tool_calling_iterations (see above)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    steps = [json.loads(line) for line in args.steps_file.read_text().splitlines() if line.strip()]
    per_step = len(steps[0])
    rows = [{"prompt": prompt_messages(t["question"], args.examples), "task_id": t["task_id"]}
            for tasks in steps for t in tasks]
    answers = {t["task_id"]: calc.Task(t["task_id"], t["question"], t["result"]) for tasks in steps for t in tasks}
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / "rows.jsonl"
    rows_path.write_text("")
    clock = StepClock(args.out, rows_path)

    def answer(messages: list[dict]) -> str:
        """The agent's answer: its first turn's (the call's result), or with tool turns the turn after the result
        (the agent's --reflect-on-tool-use; none when TRL cut it for length)."""
        if args.tool_turns == 0 or not messages[0].get("tool_calls"):
            return agent_answer(messages[0])
        return (messages[-1].get("content") or "") if len(messages) > 1 else ""

    def correct(prompts, completions, task_id, **kwargs) -> list[float]:
        """The calc agent's reward of each completion."""
        scores = [calc.reward(answers[tid], answer(messages)) for messages, tid in zip(completions, task_id)]
        clock.rewards += scores
        clock.calls += sum(bool(messages[0].get("tool_calls")) for messages in completions)
        return scores

    episodes = per_step * args.group_size
    config = GRPOConfig(
        output_dir=str(args.out / "trainer"), use_cpu=True, bf16=False, seed=args.seed, data_seed=args.seed,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0,
        num_generations=args.group_size, per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=episodes // args.micro_batch,  # one optimizer step per generation batch, as a tracerl round
        max_steps=len(steps), num_iterations=1, beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group",
        max_completion_length=args.max_completion_length, temperature=args.temperature, top_p=1.0,
        max_tool_calling_iterations=args.tool_turns, shuffle_dataset=False, gradient_checkpointing=False,
        model_init_kwargs={"dtype": torch.float32, "attn_implementation": "sdpa"},
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    trainer = TimedGRPOTrainer(model=str(args.model), reward_funcs=correct, args=config, train_dataset=Dataset.from_list(rows),
                               processing_class=tokenizer, tools=[calculator], callbacks=[clock])
    trainer.clock = clock
    clock.trainer = trainer
    trainer.save_model(str(args.out / "step-0"))
    trainer.train()


if __name__ == "__main__":
    main()
