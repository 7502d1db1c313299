"""Benchmark: the share of an agent's LLM calls that reach the dataset with the server's exact token ids, per API, on the CPU vLLM.

One ``vllm serve`` (the CPU build, ``TRACERL_VLLM_PYTHON``) serves SmolLM2-135M-Instruct with the
hermes tool template and tool parser. The same calculator agent (``examples/calc``'s problems,
tool and four worked examples, so every prompt already holds tool calls and their results) runs
under ``tracerl run`` once per API: Chat Completions (the OpenAI SDK), the Responses API (the
OpenAI SDK; every other episode continues its first call with ``previous_response_id``, which
needs ``VLLM_ENABLE_RESPONSES_API_STORE=1``, set here) and Anthropic's Messages API (the
``anthropic`` SDK). Each episode is two calls: the question, then the calculator's result when
the model called it (else the model's answer and a request to use the calculator). Each API's
captured data is built into a dataset with ``--retokenize`` (the policy's folder), and the
build's own counts (the manifest ``pipeline doctor`` explains) give, per API: the calls the
pipeline found, the transitions, how many carry the server's ids and how many were rebuilt from
their messages, and the calls that became no transition, by reason.

The pipeline reports no fidelity figure for rebuilt ids. The agents are greedy and send the same
conversations, so every Responses and Messages transition is compared with the Chat Completions
transition of the same task and step, whose ids vLLM returned: equal prompt and response ids mean
the ids (retokenised or the server's) are those of the same conversation. Where they differ, the
conversation was rendered otherwise: by ``--retokenize`` (vLLM 0.32's Messages calls, which return
no ids), or by vLLM itself (its Responses API leaves the earlier response's ``function_call`` items
out of a ``previous_response_id`` call's prompt, so a chained call after a tool call differs).

    TRACERL_VLLM_PYTHON=.venv-vllm/bin/python .venv/bin/python benchmarks/api_token_ids.py --episodes 10

Progress goes to stderr (with each captured process's own exit line); the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
APIS = {"chat": "Chat Completions", "responses": "Responses API", "messages": "Anthropic Messages"}
MAX_TOKENS = 48
CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression of numbers and + - * / and return its value.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}
USE_THE_TOOL = "Use the calculator."  # the second turn when the model answered without calling it


# ---- the agents (run under `tracerl run`, one process per API) ----------------------------------------------------------

def chat_episode(client: Any, question: str, examples: list[tuple[str, str, str]], model: str) -> tuple[str, bool]:
    """Two Chat Completions calls; (the final answer, whether the second call carried a tool result)."""
    from examples.calc.task import SYSTEM_PROMPT, calculator

    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for i, (example, expression, result) in enumerate(examples):
        call = {"id": f"example_{i}", "type": "function",
                "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}
        messages += [{"role": "user", "content": example}, {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": result}]
    messages.append({"role": "user", "content": question})
    body = {"model": model, "tools": [{"type": "function", "function": CALCULATOR}], "max_tokens": MAX_TOKENS, "temperature": 0}
    first = client.chat.completions.create(messages=messages, **body).choices[0].message
    if first.tool_calls:
        call = first.tool_calls[0]
        messages += [first.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": calculator(_expression(call.function.arguments))}]
    else:
        messages += [{"role": "assistant", "content": first.content or ""}, {"role": "user", "content": USE_THE_TOOL}]
    second = client.chat.completions.create(messages=messages, **body).choices[0].message
    return second.content or "", bool(first.tool_calls)


def responses_episode(client: Any, question: str, examples: list[tuple[str, str, str]], model: str, chain: bool) -> tuple[str, bool]:
    """Two Responses API calls, the second continuing the first by ``previous_response_id`` when ``chain``."""
    from examples.calc.task import SYSTEM_PROMPT, calculator

    items: list[dict[str, Any]] = []
    for i, (example, expression, result) in enumerate(examples):
        items += [{"role": "user", "content": example},
                  {"type": "function_call", "call_id": f"example_{i}", "name": "calculator",
                   "arguments": json.dumps({"expression": expression})},
                  {"type": "function_call_output", "call_id": f"example_{i}", "output": result}]
    items.append({"role": "user", "content": question})
    body = {"model": model, "instructions": SYSTEM_PROMPT, "tools": [{"type": "function", **CALCULATOR}],
            "max_output_tokens": MAX_TOKENS, "temperature": 0}
    first = client.responses.create(input=items, **body)
    calls = [item for item in first.output if item.type == "function_call"]
    if calls:
        new = [{"type": "function_call_output", "call_id": calls[0].call_id, "output": calculator(_expression(calls[0].arguments))}]
    else:
        new = [{"role": "user", "content": USE_THE_TOOL}]
    if chain:
        second = client.responses.create(input=new, previous_response_id=first.id, **body)
    else:
        second = client.responses.create(input=items + [item.model_dump(exclude_none=True) for item in first.output] + new, **body)
    return second.output_text, bool(calls)


def messages_episode(client: Any, question: str, examples: list[tuple[str, str, str]], model: str) -> tuple[str, bool]:
    """Two Anthropic Messages calls (a tool result and the next question share a user turn, as the API wants)."""
    from examples.calc.task import SYSTEM_PROMPT, calculator

    messages: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # the last example's tool result, sent in the next user turn
    for i, (example, expression, result) in enumerate(examples):
        messages += [{"role": "user", "content": [*pending, {"type": "text", "text": example}]},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": f"example_{i}", "name": "calculator",
                                                         "input": {"expression": expression}}]}]
        pending = [{"type": "tool_result", "tool_use_id": f"example_{i}", "content": result}]
    messages.append({"role": "user", "content": [*pending, {"type": "text", "text": question}]})
    tool = {"name": CALCULATOR["name"], "description": CALCULATOR["description"], "input_schema": CALCULATOR["parameters"]}
    # the anthropic SDK 2.x takes no temperature argument; vLLM reads it from the body
    body = {"model": model, "system": SYSTEM_PROMPT, "tools": [tool], "max_tokens": MAX_TOKENS, "extra_body": {"temperature": 0}}
    first = client.messages.create(messages=messages, **body)
    uses = [block for block in first.content if block.type == "tool_use"]
    messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]})
    if uses:
        result = calculator(str(uses[0].input.get("expression", "")))
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": result}]})
    else:
        messages.append({"role": "user", "content": USE_THE_TOOL})
    second = client.messages.create(messages=messages, **body)
    return "".join(block.text for block in second.content if block.type == "text"), bool(uses)


def _expression(arguments: str) -> str:
    """The calculator's ``expression`` argument of a call the model wrote ('' when its JSON says none)."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return ""
    return str(value.get("expression", "")) if isinstance(value, dict) else ""


def run_agent(api: str, base_url: str, episodes: int) -> None:
    """The captured process: ``episodes`` calculator problems, one rewarded episode each; prints what it sent as JSON."""
    import tracerl
    from examples.calc.task import EXAMPLES, calculator, local_tasks, reward

    examples = [(question, expression, calculator(expression)) for question, expression in EXAMPLES]
    if api == "messages":
        import anthropic

        client = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="none")  # the SDK appends /v1/messages
    else:
        import openai

        client = openai.OpenAI(base_url=base_url, api_key="none")
    tool_results = chained = 0
    for i, task in enumerate(local_tasks(seed=0)[0][:episodes]):
        with tracerl.episode(task_id=task.task_id, split="train"):
            if api == "chat":
                answer, called = chat_episode(client, task.question, examples, "policy")
            elif api == "responses":
                answer, called = responses_episode(client, task.question, examples, "policy", chain=i % 2 == 1)
                chained += i % 2 == 1
            else:
                answer, called = messages_episode(client, task.question, examples, "policy")
            tracerl.emit_reward(reward(task, answer))
        tool_results += called
        print(f"  {api} episode {i + 1}/{episodes}: {'tool called' if called else 'no tool call'}", file=sys.stderr, flush=True)
    print(json.dumps({"calls": 2 * episodes, "tool_results": tool_results, "chained": chained}))


# ---- the measurement --------------------------------------------------------------------------------------------------

def capture(api: str, base_url: str, data_dir: Path, episodes: int) -> dict[str, int]:
    """Run the agent for ``api`` under ``tracerl run`` into ``data_dir``; what the agent says it sent."""
    tracerl = Path(sys.executable).parent / "tracerl"
    command = [str(tracerl), "run", "--data-dir", str(data_dir), "--", sys.executable, __file__,
               "--agent", api, "--base-url", base_url, "--episodes", str(episodes)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"the {APIS[api]} agent failed (exit {done.returncode}); its stderr is above")
    return json.loads(done.stdout.strip().splitlines()[-1])


def build(data_dir: Path, out: Path, model: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The build's manifest (its counts, what ``pipeline doctor`` explains) and the dataset's rows."""
    from tracerl.pipeline import build_dataset, dataset_table

    manifest = build_dataset(data_dir, out, retokenize=str(model), advantage="none")
    return manifest, dataset_table(out).to_pylist()


def same_as_chat(rows: list[dict[str, Any]], chat: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(rows, of which prompt ids equal, of which response ids equal) to the Chat Completions row of the same task and step.

    Chat's rows hold the ids vLLM computed; greedy agents sending the same conversation get the same
    ones back whatever the API, so a difference is a conversation rendered otherwise (by the server
    or by --retokenize).
    """
    exact = {(r["task_id"], r["step"]): r for r in chat}
    pairs = [(r, exact.get((r["task_id"], r["step"]))) for r in rows]
    prompts = sum(1 for r, c in pairs if c and r["prompt_token_ids"] == c["prompt_token_ids"])
    responses = sum(1 for r, c in pairs if c and r["response_token_ids"] == c["response_token_ids"])
    return len(pairs), prompts, responses


def table(results: dict[str, dict[str, Any]]) -> str:
    """The per-API table, in Markdown."""
    def row(label: str, cell) -> str:
        return f"| {label} | " + " | ".join(cell(r) for r in results.values()) + " |"

    def share(n: int, total: int) -> str:
        return f"{n} ({n / total:.0%})" if total else str(n)

    def counts(r: dict[str, Any]) -> dict[str, Any]:
        return r["manifest"]["counts"]

    def exact(r: dict[str, Any]) -> int:
        return counts(r)["transitions"] - (counts(r)["llm_calls"].get("retokenized") or 0)

    def like_chat(r: dict[str, Any]) -> str:
        if r["api"] == "chat":
            return "-"
        n, prompts, responses = same_as_chat(r["rows"], results["chat"]["rows"])
        return f"prompt {prompts}/{n}, response {responses}/{n}"

    def skipped(r: dict[str, Any]) -> str:
        reasons = counts(r)["llm_calls"]["skipped"]
        return "; ".join(f"{n} {reason}" for reason, n in reasons.items() if n) or "none"

    def chains(r: dict[str, Any]) -> str:
        found = counts(r)["llm_calls"].get("response_chains") or {}
        return ", ".join(f"{n} {k}" for k, n in found.items() if n) or "-"

    lines = [
        "| | " + " | ".join(APIS[api] for api in results) + " |",
        "|---|" + "---:|" * len(results),
        row("calls the agent made", lambda r: str(r["agent"]["calls"])),
        row("  second calls carrying a tool result", lambda r: str(r["agent"]["tool_results"])),
        row("  second calls with previous_response_id", lambda r: str(r["agent"]["chained"]) if r["api"] == "responses" else "-"),
        row("LLM calls the pipeline found", lambda r: str(counts(r)["llm_calls"]["total"])),
        row("transitions", lambda r: str(counts(r)["transitions"])),
        row("  with the server's exact token ids", lambda r: f"**{share(exact(r), counts(r)['llm_calls']['total'])}**"),
        row("  retokenised (--retokenize)", lambda r: share(counts(r)["llm_calls"].get("retokenized") or 0, counts(r)["llm_calls"]["total"])),
        row("  ids equal to Chat's (vLLM's) for the same task and step", like_chat),
        row("  previous_response_id chains", chains),
        row("calls that became no transition, by reason", skipped),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10, help="episodes per API (two calls each)")
    parser.add_argument("--out", type=Path, help="where the captured data and datasets go (default: a new temporary folder)")
    parser.add_argument("--agent", choices=APIS, help=argparse.SUPPRESS)  # the captured process
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agent:
        run_agent(args.agent, args.base_url, args.episodes)
        return

    from tracerl.trainer.from_gguf import gguf_folder
    from tracerl.trainer.serving.vllm_process import running_vllm

    out = args.out or Path(tempfile.mkdtemp(prefix="tracerl-api-token-ids-"))
    out.mkdir(parents=True, exist_ok=True)
    model = gguf_folder(chat_template="hermes").path
    os.environ["VLLM_ENABLE_RESPONSES_API_STORE"] = "1"  # previous_response_id needs the responses kept
    print(f"starting the CPU vLLM on {model} (log in {out}/vllm.log) ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with running_vllm(model, tool_call_parser="hermes", log_path=out / "vllm.log") as vllm:
        print(f"  up in {time.perf_counter() - started:.0f} s at {vllm.base_url}", file=sys.stderr, flush=True)
        for api in APIS:
            print(f"capturing the {APIS[api]} agent ({args.episodes} episodes) ...", file=sys.stderr, flush=True)
            results[api] = {"api": api, "agent": capture(api, vllm.base_url, out / api / "data", args.episodes)}
    for api, result in results.items():
        print(f"building {APIS[api]}'s dataset (--retokenize) ...", file=sys.stderr, flush=True)
        result["manifest"], result["rows"] = build(out / api / "data", out / api / "dataset", model)
        for note in result["manifest"]["warnings"]:
            print(f"  {note}", file=sys.stderr)
    print(f"\nLLM calls per API on the CPU vLLM (SmolLM2-135M-Instruct, {args.episodes} episodes of 2 calls; data in {out}):\n")
    print(table(results))


if __name__ == "__main__":
    main()
