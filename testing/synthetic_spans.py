"""Synthetic span sets of any size for the pipeline benchmark (benchmarks/pipeline_build.py), written like an agent run writes them.

Each episode is one multi-step tool-using agent run: an episode span, an agent span,
``calls`` chat calls (token ids, log-probs, GenAI message JSON, response id, policy
version), a tool span between consecutive calls, and a reward span. Prompts grow as
a chat agent's do: call k's prompt is call k-1's prompt + response + tool output, so
trajectory mode can merge them. Episodes of the same task form groups of
``group_size``. Columns are built with numpy/Arrow directly (going through
``span_row`` one span at a time would dominate a million-span set); the layout is
``D/spans/date=.../hour=.../spans-*.parquet`` as the exporter writes it.

    python -m tracerl_testing.synthetic_spans --episodes 1000 --out /tmp/spans-1k
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerl.schemas import SPANS_SCHEMA
from tracerl.schemas import attributes as A

BASE_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z


def episode_id(number: int) -> str:
    """The id of episode ``number``; ids sort in the order of their numbers."""
    return f"ep-{number:07d}"


def _lists(values: np.ndarray, lengths: np.ndarray, type_: pa.DataType) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=type_.value_type), type=type_)


def _gather(stream: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``stream[starts[i]:starts[i]+lengths[i]]`` for all i, without a Python loop."""
    total = int(lengths.sum())
    first = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return stream[first + np.arange(total)]


def generate(episodes: int, *, first: int = 0, calls: int = 4, group_size: int = 8, seed: int = 0,
             prompt_range: tuple[int, int] = (200, 400), response_range: tuple[int, int] = (30, 150),
             tool_range: tuple[int, int] = (10, 60)) -> pa.Table:
    """A spans table of ``episodes * (calls * 2 + 2)`` spans (10 per episode with the defaults).

    Episodes are numbered from ``first``, so tables generated in chunks do not collide.
    """
    rng = np.random.default_rng(seed)
    base_len = rng.integers(*prompt_range, size=episodes)
    resp_len = rng.integers(*response_range, size=(episodes, calls))
    tool_len = rng.integers(*tool_range, size=(episodes, calls))
    # prompt of call k = base + sum over j<k of (response_j + tool_j)
    grow = np.cumsum(resp_len + tool_len, axis=1) - (resp_len + tool_len)
    prompt_len = (base_len[:, None] + grow).ravel()
    stream_len = base_len + (resp_len + tool_len).sum(axis=1)
    stream_start = np.concatenate([[0], np.cumsum(stream_len)[:-1]])
    stream = rng.integers(3, 32_000, size=int(stream_len.sum()), dtype=np.int32)
    call_start = np.repeat(stream_start, calls)
    prompt_ids = _lists(_gather(stream, call_start, prompt_len), prompt_len, pa.list_(pa.int32()))
    resp_flat = resp_len.ravel()
    response_ids = _lists(_gather(stream, call_start + prompt_len, resp_flat), resp_flat, pa.list_(pa.int32()))
    logprobs = _lists(-rng.exponential(0.5, size=int(resp_flat.sum())).astype(np.float32), resp_flat, pa.list_(pa.float32()))

    per_episode = calls * 2 + 2  # episode, agent, calls, a tool between consecutive calls, reward
    n = episodes * per_episode
    ep = np.repeat(np.arange(episodes), per_episode)
    slot = np.tile(np.arange(per_episode), episodes)  # 0 episode, 1 agent, 2.. call/tool alternating, last reward
    numbers = range(first, first + episodes)
    trace = np.array([f"{e + 1:032x}" for e in numbers], dtype=object)
    episode_ids = np.array([episode_id(e) for e in numbers], dtype=object)
    task_ids = np.array([f"task-{e // group_size:06d}" for e in numbers], dtype=object)
    span_ids = np.array([f"{e + first + 1:08x}{s + 1:08x}" for e, s in zip(ep, slot)], dtype=object)
    parent = np.where(slot == 0, None, np.where(slot == 1, np.array([f"{e + first + 1:08x}{1:08x}" for e in ep], dtype=object),
                                                 np.array([f"{e + first + 1:08x}{2:08x}" for e in ep], dtype=object)))
    body = (slot >= 2) & (slot < per_episode - 1)
    is_call = body & ((slot - 2) % 2 == 0)
    is_tool = body & ((slot - 2) % 2 == 1)
    is_reward = slot == per_episode - 1
    start = BASE_NS + (ep.astype(np.int64) + first) * 50_000_000 + slot.astype(np.int64) * 1_000_000
    end = start + 900_000
    end[slot == 0] = start[slot == 0] + per_episode * 1_000_000 + 1
    end[slot == 1] = start[slot == 1] + (per_episode - 1) * 1_000_000
    end[is_reward] = start[is_reward]
    names = np.where(slot == 0, A.EPISODE_SPAN_NAME, np.where(slot == 1, "invoke_agent solver", np.where(
        is_call, "chat policy", np.where(is_tool, "execute_tool calculator", A.REWARD_SPAN_NAME)))).astype(object)
    rewards = (rng.random(episodes) < 0.5).astype(np.float64)
    call_index = np.cumsum(is_call) - 1
    response_id = np.array([f"chatcmpl-{first * calls + i:09d}" if c else None for i, c in zip(call_index, is_call)],
                           dtype=object)

    # each span's attribute JSON: the episode's part, then its kind's (JSON written once per episode and
    # kind, joined per span: a json.dumps per span took most of a million-span set's generation time)
    def dumps(values: dict) -> str:
        return json.dumps(values, separators=(",", ":"))

    output = json.dumps([{"role": "assistant", "parts": [{"type": "tool_call", "name": "calculator", "arguments": {"expression": "6*7"}}]}])
    tool_part = "," + dumps({A.GEN_AI_OPERATION: A.GEN_AI_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "calculator", A.GEN_AI_TOOL_CALL_RESULT: "42"})[1:]
    agent_part = "," + dumps({A.GEN_AI_OPERATION: A.GEN_AI_INVOKE_AGENT, A.GEN_AI_AGENT_NAME: "solver"})[1:]
    heads, call_parts, reward_parts = [], [], []
    for e in range(episodes):
        heads.append(dumps({A.EPISODE_ID: episode_ids[e], A.TASK_ID: task_ids[e], A.SPLIT: "train"})[:-1])
        call_parts.append("," + dumps({
            A.GEN_AI_SYSTEM: "openai", A.GEN_AI_OPERATION: A.GEN_AI_CHAT, A.GEN_AI_REQUEST_MODEL: "policy", A.GEN_AI_AGENT_NAME: "solver",
            A.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"solve task {task_ids[e]}"}]}]),
            A.GEN_AI_OUTPUT_MESSAGES: output})[1:])
        reward_parts.append("," + dumps({A.REWARD_VALUE: rewards[e], A.REWARD_NAME: "correct"})[1:])
    kinds = np.select([is_call, is_tool, slot == 1, is_reward], [1, 2, 3, 4], 0).tolist()
    attributes = [heads[e] + ("}" if k == 0 else call_parts[e] if k == 1 else tool_part if k == 2 else agent_part if k == 3
                              else reward_parts[e]) for e, k in zip(ep.tolist(), kinds)]

    def call_column(values: pa.Array) -> pa.Array:
        return _spread(values, is_call, call_index)

    return pa.table({
        "trace_id": trace[ep], "span_id": span_ids, "parent_span_id": parent, "name": names,
        "kind": np.where(is_call, "CLIENT", "INTERNAL").astype(object),
        "start_time_unix_nano": start, "end_time_unix_nano": end,
        "status_code": np.full(n, "OK", dtype=object), "status_message": np.full(n, None, dtype=object),
        "service_name": np.full(n, "bench-agent", dtype=object), "scope_name": np.full(n, "bench", dtype=object),
        "scope_version": np.full(n, None, dtype=object),
        "episode_id": episode_ids[ep], "task_id": task_ids[ep], "split": np.full(n, "train", dtype=object),
        "agent_name": np.where(is_call | (slot == 1), "solver", None).astype(object),
        "policy_version": pa.array(np.full(n, 3), mask=~is_call),
        "response_id": response_id, "request_model": np.where(is_call, "policy", None).astype(object),
        "response_model": np.where(is_call, "policy", None).astype(object),
        "prompt_token_ids": call_column(prompt_ids), "completion_token_ids": call_column(response_ids),
        "completion_logprobs": call_column(logprobs),
        "reward_value": pa.array(rewards[ep], mask=~is_reward), "reward_name": np.where(is_reward, "correct", None).astype(object),
        "attributes": attributes, "events": np.full(n, None, dtype=object), "links": np.full(n, None, dtype=object),
        "resource": np.full(n, '{"service.name":"bench-agent"}', dtype=object),
    }, schema=SPANS_SCHEMA)


def _spread(values: pa.Array, mask: np.ndarray, index: np.ndarray) -> pa.Array:
    """Row i gets ``values[index[i]]`` where ``mask[i]``, else null."""
    taken = values.take(pa.array(np.where(mask, index, 0)))
    return pc.if_else(pa.array(mask), taken, pa.nulls(len(mask), values.type))


def write(table: pa.Table, out: Path, spans_per_file: int = 20_000, prefix: str = "spans") -> Path:
    """Write ``table`` as ``out/spans/date=2026-01-01/hour=00/PREFIX-*.parquet``; return ``out``."""
    folder = out / "spans" / "date=2026-01-01" / "hour=00"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(0, table.num_rows, spans_per_file):
        pq.write_table(table.slice(i, spans_per_file), folder / f"{prefix}-{i // spans_per_file:05d}.parquet", compression="zstd")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    table = generate(args.episodes, calls=args.calls)
    write(table, args.out)
    print(f"{table.num_rows} spans -> {args.out}")


if __name__ == "__main__":
    main()
