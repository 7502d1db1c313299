"""`tracerl model to-gguf FOLDER OUT.gguf`: a folder (or base + LoRA adapter) as a GGUF for llama.cpp, Ollama and LM Studio.

The round trip is checked from outside through the command users have for the other direction:
`tracerl model from-gguf` of the written file (transformers' own GGUF loader) must give the
folder's logits (F16: within fp16 rounding; Q8_0: a looser bound) and the same token ids. The
tiny Llama exercises llama.cpp's q/k permutation (and a test shows the check catches its absence);
the tiny Qwen2 the ChatML template the Modelfile translates. llama.cpp itself is not run here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tracerl.schemas import environment as E
from tracerl.trainer.to_gguf import MAX_LOGIT_GAP, ToGgufError, export_gguf

TEXTS = ("task: add 3 4 ; tool: add ; result: 7", "The agent calls a tool.\n<|user|>max 9 2<|end|>", "  spaces,  digits 0123 and é")


def _app():
    from tracerl.cli import build_app

    return build_app("model")


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    from tracerl.trainer.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("llama") / "tiny-llama", seed=0)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> Path:
    from tracerl_testing.qwen2_model import build_qwen2_model

    return build_qwen2_model(tmp_path_factory.mktemp("qwen2") / "tiny-qwen2", seed=0)


def _gap_after_from_gguf(folder: Path, gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """(max |logit gap|, max |logit|) between ``folder`` and what `tracerl model from-gguf` makes of ``gguf_file``; token ids must agree."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tracerl.trainer.from_gguf import gguf_folder

    monkeypatch.setenv(E.CACHE_DIR_ENV, str(tmp_path / "cache"))
    back = gguf_folder(str(gguf_file), tmp_path / f"{gguf_file.stem}-back").path
    ours, theirs = AutoTokenizer.from_pretrained(folder), AutoTokenizer.from_pretrained(back)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    read = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).eval()
    gap = scale = 0.0
    with torch.no_grad():
        for text in TEXTS:
            ids = ours(text)["input_ids"]
            assert theirs(text)["input_ids"] == ids, text
            want = model(torch.tensor([ids])).logits
            gap = max(gap, float((read(torch.tensor([ids])).logits - want).abs().max()))
            scale = max(scale, float(want.abs().max()))
    return gap, max(scale, 1.0)


@pytest.mark.parametrize("qtype", ["f16", "q8_0"])
def test_from_gguf_of_the_written_file_gives_the_llama_folders_logits_and_token_ids(
    llama: Path, qtype: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    out = tmp_path / f"tiny-{qtype}.gguf"
    done = CliRunner().invoke(_app(), ["model", "to-gguf", str(llama), str(out), "--type", qtype])
    assert done.exit_code == 0, done.output
    assert "max abs logit diff" in done.output and str(out) in done.output
    gap, scale = _gap_after_from_gguf(llama, out, tmp_path, monkeypatch)
    print(f"llama {qtype}: max abs logit diff after from-gguf {gap:.3g} (logit scale {scale:.3g})")
    assert gap <= MAX_LOGIT_GAP[qtype] * scale
    if qtype == "f16":
        assert gap <= 2e-3 * scale  # fp16 rounding of the weights, nothing more (measured 5e-4)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_qwen2_round_trips_and_its_chatml_template_becomes_the_modelfiles(qwen2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import gguf

    done = export_gguf(qwen2, tmp_path / "qwen2.gguf")
    assert done.architecture == "qwen2" and done.pre_tokenizer == "qwen2" and done.template == "translated"
    from transformers import AutoTokenizer

    reader = gguf.GGUFReader(done.path)
    assert reader.fields["tokenizer.chat_template"].contents() == AutoTokenizer.from_pretrained(qwen2).chat_template
    gap, scale = _gap_after_from_gguf(qwen2, done.path, tmp_path, monkeypatch)
    assert gap <= 2e-3 * scale
    modelfile = (tmp_path / "Modelfile").read_text()
    assert modelfile.startswith("# Ollama") and "FROM ./qwen2.gguf\n" in modelfile
    assert 'TEMPLATE """' in modelfile and "<tool_call>" in modelfile and "{{ .Content }}" in modelfile
    assert 'PARAMETER stop "<|im_end|>"' in modelfile


def test_an_adapter_is_merged_first_and_the_file_gives_base_plus_adapters_logits(llama: Path, tmp_path: Path):
    from tracerl_testing.installed import require_module

    require_module("peft", "pip install peft (or tracerl[openrlhf])")
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float32)
    torch.manual_seed(3)
    config = LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(tmp_path / "lora")
    out = tmp_path / "out" / "adapted.gguf"
    done = CliRunner().invoke(_app(), ["model", "to-gguf", str(llama), str(out), "--adapter", str(tmp_path / "lora")])
    assert done.exit_code == 0, done.output
    assert "merged" in done.output and sorted(p.name for p in out.parent.iterdir()) == ["Modelfile", "adapted.gguf"]  # the merged folder was scratch

    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float32), tmp_path / "lora").eval()
    read = AutoModelForCausalLM.from_pretrained(out.parent, gguf_file=out.name, dtype=torch.float32).eval()
    plain = AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float32).eval()
    ids = torch.tensor([AutoTokenizer.from_pretrained(llama)(TEXTS[0])["input_ids"]])
    with torch.no_grad():
        want = adapted(ids).logits
        assert float((read(ids).logits - want).abs().max()) <= 2e-3
        assert float((plain(ids).logits - want).abs().max()) > 2e-2  # the adapter is in the file, not just the base


def test_a_template_that_is_not_chatml_is_left_out_of_the_modelfile_with_why(llama: Path, tmp_path: Path):
    done = export_gguf(llama, tmp_path / "tiny.gguf", qtype="q8_0")
    modelfile = done.modelfile.read_text()
    assert done.template == "omitted" and "TEMPLATE \"\"\"" not in modelfile and "# TEMPLATE omitted: the chat template is not ChatML" in modelfile
    assert 'PARAMETER stop "<|end|>"' in modelfile  # the tiny model's end-of-turn token


def test_without_llamas_q_k_permutation_the_read_back_check_refuses_the_file(llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import tracerl.trainer.to_gguf as to_gguf

    monkeypatch.setitem(to_gguf.ARCHITECTURES, "LlamaForCausalLM", ("LLAMA", False))
    with pytest.raises(ToGgufError, match=r"read back by transformers, its logits differ .* not written"):
        export_gguf(llama, tmp_path / "unpermuted.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_for_space_says_so_and_leaves_no_half_written_file(llama: Path, tmp_path: Path):
    """The operating system refuses the write (a file-size limit: what a full disk or a quota does to a writer) in
    the real command's process: the error names the file and what to do, and the folder holds nothing of it."""
    import resource
    import signal
    import subprocess
    import sys

    def small_files_only() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    out = tmp_path / "out" / "m.gguf"
    done = subprocess.run([sys.executable, "-m", "tracerl", "model", "to-gguf", str(llama), str(out)], capture_output=True,
                          text=True, timeout=300, preexec_fn=small_files_only)
    assert done.returncode == 2, done.stderr[-2000:]
    text = " ".join((done.stdout + done.stderr).split())
    assert "writing the GGUF failed (" in text and "nothing was written: make room in" in text, text[-2000:]
    assert list(out.parent.iterdir()) == []


def test_an_architecture_the_writer_cannot_map_is_named_with_what_is_supported(tmp_path: Path):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    done = CliRunner().invoke(_app(), ["model", "to-gguf", str(folder), str(tmp_path / "out.gguf")])
    assert done.exit_code == 2
    text = "".join(done.output.split())  # rich wraps at the terminal's width
    assert "architectures['GPT2LMHeadModel']cannotbewrittenasaGGUF" in text and "LlamaForCausalLM,Qwen2ForCausalLM" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt2"]


def test_an_existing_file_is_kept_unless_forced_and_an_adapter_is_not_a_folder_to_convert(llama: Path, tmp_path: Path):
    out = tmp_path / "m.gguf"
    out.write_bytes(b"mine")
    with pytest.raises(ToGgufError, match="exists: pass --force"):
        export_gguf(llama, out)
    assert out.read_bytes() == b"mine"
    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "adapter_config.json").write_text("{}")
    with pytest.raises(ToGgufError, match="is a LoRA adapter .*--adapter"):
        export_gguf(tmp_path / "lora", tmp_path / "a.gguf")
    with pytest.raises(ToGgufError, match=r"name the output file \*\.gguf"):
        export_gguf(llama, tmp_path / "model.bin")
    export_gguf(llama, out, force=True)
    assert out.read_bytes()[:4] == b"GGUF"
