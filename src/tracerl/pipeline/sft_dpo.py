"""Supervised and preference datasets from the same transitions: ``--export sft`` and ``--export dpo``.

Most production episodes are scored relative to their task's other episodes (a judge, a few
labels), and the same scores that give GRPO its advantages choose demonstrations and pairs:

- ``OUT-sft/``: for every task, its best-scored episode when the score reaches
  ``--sft-min-reward``: each of its calls as ``input`` (the chat messages the model saw) and
  ``output`` (what it answered, as messages), with the exact ``prompt_token_ids`` and
  ``response_token_ids`` the policy used.
- ``OUT-dpo/``: for every task with two episodes scored at least ``--dpo-min-margin`` apart,
  the first call of its best (``chosen``) and its worst (``rejected``) episode, when both saw the
  same prompt token for token (a later call's prompt holds the episode's own history, so only
  the first is a shared prompt); ``margin`` is the score difference, which OpenRLHF's DPO reader
  uses for its margin loss.

An episode's score is the return of its first transition (the whole episode's reward under
identical credit; discounted under ``--credit discounted``). Ties go to the episode with the
smaller id, so a rebuild chooses the same. Both folders hold ``data.jsonl`` (what OpenRLHF's
``SFTDataset``/``RewardDataset`` read with ``apply_chat_template``, keys ``input``/``output`` and
``prompt``/``chosen``/``rejected``) and ``data.parquet`` (the same rows, for ``datasets``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerl.pipeline.messages import chat_messages

_SCORE_COLUMNS = ["episode_id", "task_id", "step", "return"]


def episode_scores(files: list[Path]) -> dict[str, tuple[str, float]]:
    """episode_id -> (task_id, score): the return of the episode's first transition."""
    if not files:
        return {}
    table = pa.concat_tables(pq.read_table(f, columns=_SCORE_COLUMNS) for f in files)
    first = table.group_by("episode_id").aggregate([("step", "min")])
    firsts = table.join(first, keys=["episode_id", "step"], right_keys=["episode_id", "step_min"], join_type="inner")
    return {e: (t, r) for e, t, r in zip(*(firsts.column(c).to_pylist() for c in ("episode_id", "task_id", "return")))}


def _by_task(scores: dict[str, tuple[str, float]]) -> dict[str, list[tuple[float, str]]]:
    """task -> [(score, episode)], best first (ties: smaller episode id first)."""
    groups: dict[str, list[tuple[float, str]]] = {}
    for episode, (task, score) in scores.items():
        if task is not None:
            groups.setdefault(task, []).append((score, episode))
    return {task: sorted(group, key=lambda item: (-item[0], item[1])) for task, group in groups.items()}


def _rows(files: list[Path], wanted: set[str], columns: list[str]) -> list[dict]:
    """The transitions of ``wanted`` episodes, in (episode, step) order, file by file."""
    found = []
    for file in files:
        table = pq.read_table(file, columns=columns)
        found += table.filter(pc.is_in(table.column("episode_id"), pa.array(sorted(wanted), pa.string()))).to_pylist()
    return sorted(found, key=lambda r: (r["episode_id"], r["step"]))


def _write(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True)
    with open(folder / "data.jsonl", "w") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    if rows:
        pq.write_table(pa.Table.from_pylist(rows), folder / "data.parquet", compression="zstd")


def _messages(text: str | None, role: str | None = None) -> list[dict[str, str]]:
    messages = chat_messages(text)
    return [{**m, "role": role} for m in messages] if role else messages


def write_sft(files: list[Path], folder: Path, min_reward: float) -> dict:
    scores = _by_task(episode_scores(files))
    best = {group[0][1]: group[0][0] for group in scores.values() if group[0][0] >= min_reward}
    columns = ["episode_id", "task_id", "step", "agent_name", "input_messages", "output_messages", "prompt_token_ids", "response_token_ids"]
    rows = [
        {"input": _messages(r["input_messages"]), "output": _messages(r["output_messages"], "assistant"),
         "prompt_token_ids": r["prompt_token_ids"], "response_token_ids": r["response_token_ids"],
         "episode_id": r["episode_id"], "task_id": r["task_id"], "step": r["step"], "agent_name": r["agent_name"],
         "score": best[r["episode_id"]]}
        for r in _rows(files, set(best), columns)
    ]
    _write(folder, rows)
    return {"rows": len(rows), "episodes": len(best), "tasks": len(scores), "tasks_below_min_reward": len(scores) - len(best)}


def write_dpo(files: list[Path], folder: Path, min_margin: float) -> dict:
    scores = _by_task(episode_scores(files))
    pairs = {task: (group[0], group[-1]) for task, group in scores.items() if len(group) > 1 and group[0][0] - group[-1][0] >= min_margin}
    columns = ["episode_id", "task_id", "step", "input_messages", "output_messages", "prompt_token_ids", "response_token_ids"]
    firsts: dict[str, dict] = {}
    for r in _rows(files, {e for pair in pairs.values() for _, e in pair}, columns):
        firsts.setdefault(r["episode_id"], r)
    rows, mismatched = [], 0
    for task, ((high, chosen), (low, rejected)) in sorted(pairs.items()):
        c, r = firsts[chosen], firsts[rejected]
        if c["prompt_token_ids"] != r["prompt_token_ids"]:
            mismatched += 1
            continue
        rows.append({
            "prompt": _messages(c["input_messages"]), "chosen": _messages(c["output_messages"], "assistant"),
            "rejected": _messages(r["output_messages"], "assistant"), "margin": high - low,
            "prompt_token_ids": c["prompt_token_ids"], "chosen_token_ids": c["response_token_ids"],
            "rejected_token_ids": r["response_token_ids"], "task_id": task, "chosen_episode_id": chosen, "rejected_episode_id": rejected,
        })
    _write(folder, rows)
    return {"rows": len(rows), "tasks": len(scores), "tasks_without_pair": len(scores) - len(pairs), "prompt_mismatch": mismatched}
