"""The OpenRLHF and Hugging Face exports, written beside the dataset folder."""

from __future__ import annotations

import json

import datasets

from tracerl.pipeline import build_dataset
from tracerl.pipeline.build_output import export_folder
from tracerl_testing.span_builders import chat_episode, write_spans


def test_openrlhf_export_has_its_default_keys_and_the_token_fields(data_dir, tmp_path):
    write_spans(data_dir, chat_episode("e1") + chat_episode("e2", reward=0.0))
    out = tmp_path / "out"
    manifest = build_dataset(data_dir, out, exports=("openrlhf",))
    folder = export_folder(out, "openrlhf")
    assert folder == tmp_path / "out-openrlhf"
    assert manifest["outputs"]["exports"]["openrlhf"] == {
        "folder": "out-openrlhf", "rows": 6, "files": ["transitions.jsonl", "transitions.parquet"]}
    first = json.loads((folder / "transitions.jsonl").read_text().splitlines()[0])
    assert first["input"] == [{"role": "user", "content": "q"}] and first["output"] == "a"
    assert first["label"] == 1.0 and first["response_mask"] == [1, 1]


def test_hugging_face_export_loads_offline_with_datasets(data_dir, tmp_path):
    write_spans(data_dir, chat_episode("e1") + chat_episode("e2", reward=0.0))
    out = tmp_path / "out"
    build_dataset(data_dir, out, exports=("hf",))
    loaded = datasets.load_dataset(str(export_folder(out, "hf")), cache_dir=str(tmp_path / "hf-cache"))
    assert list(loaded) == ["train"] and loaded["train"].num_rows == 6
    assert loaded["train"][0]["prompt_token_ids"] == [1, 2]


def test_a_full_rebuild_removes_the_exports_of_the_dataset_it_replaces(data_dir, tmp_path):
    write_spans(data_dir, chat_episode("e1"))
    out = tmp_path / "out"
    build_dataset(data_dir, out, exports=("openrlhf", "hf"))
    build_dataset(data_dir, out, exports=("hf",))
    assert not export_folder(out, "openrlhf").exists() and export_folder(out, "hf").is_dir()
