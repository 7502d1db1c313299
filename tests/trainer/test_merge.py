"""`tracerl model merge BASE ADAPTER OUT`: a LoRA adapter folded into its base, a folder any server takes without LoRA.

A real tiny Llama, a real LoRA adapter made here with peft (random, non-zero B so it moves the
model), the real command through typer's runner; the checks below are made again from outside,
on sequences the command never saw, with plain transformers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracerl_testing.installed import require_module

require_module("peft", "pip install peft (or tracerl[openrlhf])")

import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from tracerl.trainer.merge import MARKER, MergeError, merge_adapter  # noqa: E402

ADAPTER_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
PROBES = ("task: add 3 4 ; tool: add", "The agent answers 7.", "max min diff")


def _app():
    from tracerl.cli import build_app

    return build_app("model")


def _write_adapter(base: Path, out: Path, *, seed: int, with_tokenizer: bool = False) -> Path:
    """A rank-8 LoRA on every linear layer with random A and B (peft's own init_lora_weights=False), as peft saves it."""
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    torch.manual_seed(seed)
    config = LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(out)
    if with_tokenizer:  # as tracerl's trainer saves a LoRA round: the tokenizer beside the adapter, here with its own template
        tokenizer = AutoTokenizer.from_pretrained(base)
        tokenizer.chat_template = ADAPTER_TEMPLATE
        tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    from tracerl.trainer.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("base") / "tiny", seed=0)


@pytest.fixture(scope="module")
def adapter(base: Path, tmp_path_factory) -> Path:
    return _write_adapter(base, tmp_path_factory.mktemp("adapter") / "lora", seed=1, with_tokenizer=True)


@pytest.fixture(scope="module")
def merged(base: Path, adapter: Path, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("merged") / "full"
    done = CliRunner().invoke(_app(), ["model", "merge", str(base), str(adapter), str(out)])
    assert done.exit_code == 0, done.output
    return out, done.output


def _adapted(base: Path, adapter: Path):
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter).eval()


def test_the_merged_folder_gives_base_plus_adapters_logits_and_says_how_close(base: Path, adapter: Path, merged: tuple[Path, str]):
    out, output = merged
    assert str(out) in output and "max abs logit diff to base+adapter" in output
    assert sorted(p.name for p in out.parent.iterdir()) == ["full"]  # no hidden folder left beside it
    assert not (out / "adapter_config.json").exists() and (out / "model.safetensors").is_file()
    record = json.loads((out / MARKER).read_text())
    assert record["max_merge_gap"] <= 1e-4 and record["dtype"] == "float32" and record["tokenizer_from"] == "adapter"

    full = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    adapted, plain = _adapted(base, adapter), AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        for text in PROBES:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            want = adapted(ids).logits
            assert float((full(ids).logits - want).abs().max()) <= 1e-4
            assert float((plain(ids).logits - want).abs().max()) > 1e-2  # the adapter moved the model: the check above means something


def test_plain_transformers_generates_the_same_greedy_tokens_as_base_plus_adapter(base: Path, adapter: Path, merged: tuple[Path, str]):
    out, _ = merged
    full = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    adapted = _adapted(base, adapter)
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "task: add 3 4"}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)["input_ids"]
    options = dict(max_new_tokens=16, do_sample=False, min_new_tokens=16, pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        assert full.generate(prompt, **options).tolist() == adapted.generate(input_ids=prompt, **options).tolist()


def test_the_tokenizer_and_chat_template_come_from_the_adapter_folder_when_the_trainer_saved_them_there(adapter: Path, merged: tuple[Path, str]):
    out, _ = merged
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == ADAPTER_TEMPLATE
    assert (out / "tokenizer.json").read_bytes() == (adapter / "tokenizer.json").read_bytes()


def test_an_adapter_of_another_base_is_refused_naming_both_and_nothing_is_left(base: Path, tmp_path: Path):
    from tracerl_testing.qwen2_model import build_qwen2_model

    other = build_qwen2_model(tmp_path / "qwen2", seed=0)
    foreign = _write_adapter(other, tmp_path / "qwen2-lora", seed=2)
    out = tmp_path / "out" / "merged"
    done = CliRunner().invoke(_app(), ["model", "merge", str(base), str(foreign), str(out)])
    assert done.exit_code == 2
    text = "".join(done.output.split())  # rich wraps at the terminal's width, inside long paths too
    for said in ("adapter_config.json names base_model_name_or_path", f"pass {other} as BASE", "hidden_size 256 there, 128 in BASE"):
        assert "".join(said.split()) in text
    assert not (tmp_path / "out").exists()

    # the same adapter naming a hub id (nothing here to compare with): peft's own size mismatch, explained
    config = json.loads((foreign / "adapter_config.json").read_text())
    (foreign / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}))
    with pytest.raises(MergeError, match=r"does not fit .*other shapes than the base's layers .*Qwen/Qwen2\.5-0\.5B-Instruct.*size mismatch"):
        merge_adapter(base, foreign, out)
    assert not out.exists()


def test_an_adapter_with_layers_the_base_lacks_is_refused(base: Path, adapter: Path, tmp_path: Path):
    """Same widths, fewer layers: peft alone would load it, dropping the extra layers' weights without a word."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = json.loads((base / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version")}
    shallow = tmp_path / "one-layer"
    LlamaForCausalLM(LlamaConfig(**{**config, "num_hidden_layers": 1})).save_pretrained(shallow)
    AutoTokenizer.from_pretrained(base).save_pretrained(shallow)
    moved = shutil.copytree(adapter, tmp_path / "lora")
    config = json.loads((moved / "adapter_config.json").read_text())
    (moved / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "somewhere/else"}))
    with pytest.raises(MergeError, match=r"tensors have no layer in the base \(e\.g\. .*layers\.1\."):
        merge_adapter(shallow, moved, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_folders_that_are_not_a_model_or_an_adapter_are_named(base: Path, adapter: Path, tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MergeError, match=r"empty is not a model folder \(no config\.json\)"):
        merge_adapter(empty, adapter, tmp_path / "out")
    with pytest.raises(MergeError, match=r"is a LoRA adapter .* pass the base model first"):
        merge_adapter(adapter, adapter, tmp_path / "out")
    with pytest.raises(MergeError, match=r"has no adapter_config\.json: it is a full model"):
        merge_adapter(base, base, tmp_path / "out")
    with pytest.raises(MergeError, match=r"no such folder"):
        merge_adapter(base, tmp_path / "nothing", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_an_existing_out_is_kept_unless_forced_and_never_an_input(base: Path, adapter: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    done = CliRunner().invoke(_app(), ["model", "merge", str(base), str(adapter), str(out)])
    assert done.exit_code == 2 and "exists:pass--force" in "".join(done.output.split())
    assert (out / "mine.txt").read_text() == "keep"
    with pytest.raises(MergeError, match="is \\(or holds\\) an input"):
        merge_adapter(base, adapter, base, force=True)
    done = CliRunner().invoke(_app(), ["model", "merge", str(base), str(adapter), str(out), "--force"])
    assert done.exit_code == 0, done.output
    assert not (out / "mine.txt").exists() and (out / MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failure_while_writing_leaves_nothing(base: Path, adapter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import tracerl.trainer.merge as merge

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(merge, "_copy_tokenizer", broken)
    with pytest.raises(OSError, match="disk full"):
        merge_adapter(base, adapter, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_bfloat16_base_is_merged_in_float32_and_written_in_bfloat16(base: Path, adapter: Path, tmp_path: Path):
    from safetensors import safe_open

    half = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).save_pretrained(half)
    AutoTokenizer.from_pretrained(base).save_pretrained(half)
    done = merge_adapter(half, adapter, tmp_path / "out")
    assert done.dtype == "bfloat16" and done.max_merge_gap <= 1e-4
    assert 0 < done.max_written_gap < 0.1  # bf16 rounding of the merged weights, reported beside the merge's own gap
    with safe_open(done.path / "model.safetensors", framework="pt") as weights:
        assert {weights.get_tensor(name).dtype for name in weights.keys()} == {torch.bfloat16}
