"""Exports of a built dataset for other trainers, in folders beside the dataset folder ``OUT``.

They sit beside it, not in it, because they hold Parquet files too: inside, a glob over
the dataset (``OUT/**/*.parquet``) would read their rows as transitions.

- ``OUT-openrlhf/``: ``transitions.jsonl`` and ``transitions.parquet`` with OpenRLHF's
  default keys (``input`` chat messages, ``output`` text, ``label`` the return) plus the
  token-level fields (ids, log-probs, mask) and ``advantage`` for pre-computed rollouts.
- ``OUT-hf/``: a Hugging Face ``datasets`` folder: ``data/{split}-*.parquet`` with the full
  dataset rows and a README whose ``configs`` maps files to splits, so
  ``datasets.load_dataset("OUT-hf")`` works offline.
- ``OUT-sft/``, ``OUT-dpo/``: demonstrations and preference pairs (:mod:`tracerl.pipeline.sft_dpo`).

Both are written file by file from ``transitions-*.parquet``, so memory holds one file.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracerl.pipeline.build_output import export_folder, transition_files
from tracerl.pipeline.messages import chat_messages
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.sft_dpo import write_dpo, write_sft

_TOKEN_FIELDS = ("prompt_token_ids", "response_token_ids", "response_logprobs", "response_mask")
_KEEP = ("episode_id", "task_id", "split", "agent_name", "step", "reward", "return", "advantage", "policy_version")


def _openrlhf_rows(table: pa.Table) -> pa.Table:
    inputs = [json.dumps(chat_messages(t), ensure_ascii=False) for t in table.column("input_messages").to_pylist()]
    outputs = ["".join(m["content"] for m in chat_messages(t)) for t in table.column("output_messages").to_pylist()]
    columns = {"input": pa.array(inputs), "output": pa.array(outputs), "label": table.column("return")}
    columns |= {name: table.column(name) for name in _TOKEN_FIELDS + _KEEP}
    return pa.table(columns)


def _write_openrlhf(files: list[Path], folder: Path) -> dict:
    folder.mkdir(parents=True)
    writer: pq.ParquetWriter | None = None
    rows = 0
    with open(folder / "transitions.jsonl", "w") as jsonl:
        for file in files:
            table = _openrlhf_rows(pq.read_table(file))
            if writer is None:
                writer = pq.ParquetWriter(folder / "transitions.parquet", table.schema, compression="zstd")
            writer.write_table(table)
            for row in table.to_pylist():
                row["input"] = json.loads(row["input"])
                jsonl.write(json.dumps(row, ensure_ascii=False) + "\n")
            rows += table.num_rows
    if writer is not None:
        writer.close()
    return {"rows": rows, "files": ["transitions.jsonl", "transitions.parquet"] if rows else []}


def _write_hf(files: list[Path], folder: Path) -> dict:
    data = folder / "data"
    data.mkdir(parents=True)
    counts: dict[str, int] = {}
    for file in files:
        table = pq.read_table(file)
        splits = pc.fill_null(table.column("split"), "train")
        for split in sorted(set(splits.to_pylist())):
            part = table.filter(pc.equal(splits, split))
            pq.write_table(part, data / f"{split}-{file.stem}.parquet")
            counts[split] = counts.get(split, 0) + part.num_rows
    configs = "\n".join(f"  - split: {s}\n    path: data/{s}-*.parquet" for s in sorted(counts))
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n" + configs + "\n---\n\n"
        "Transitions built by `tracerl pipeline build-dataset` (one row per policy LLM call).\n"
    )
    return {"rows_by_split": counts}


_WRITERS: dict[str, Callable[[list[Path], Path, BuildOptions], dict]] = {  # one per name of options.EXPORTS
    "openrlhf": lambda files, folder, _: _write_openrlhf(files, folder),
    "hf": lambda files, folder, _: _write_hf(files, folder),
    "sft": lambda files, folder, options: write_sft(files, folder, options.sft_min_reward),
    "dpo": lambda files, folder, options: write_dpo(files, folder, options.dpo_min_margin),
}


def export(out: Path, options: BuildOptions) -> dict:
    """Write the exports ``options`` asks for of the dataset in ``out`` beside it; return what was written, by kind."""
    files = transition_files(out)
    done = {}
    for kind in options.exports:
        folder = export_folder(out, kind)
        if folder.exists():
            shutil.rmtree(folder)
        done[kind] = {"folder": folder.name, **_WRITERS[kind](files, folder, options)}
    return done
