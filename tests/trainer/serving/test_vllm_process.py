"""``vllm serve``'s command line as tracerl starts it: a GPU gets what users run there (dtype auto, CUDA
graphs), the CPU build what it needs (float32, eager); LoRA ranks are rounded up to one vLLM accepts.
The CPU build serving for real is tests/trainer/vllm and tests/examples/test_real_model_recipes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracerl.trainer.serving.vllm_process import VllmOptions, vllm_command, vllm_lora_rank


def command(options: VllmOptions = VllmOptions(), *, cuda: bool, **kwargs) -> list[str]:
    return vllm_command("python", Path("model"), served_model_name="policy", host="127.0.0.1", port=8000, options=options, cuda=cuda, **kwargs)


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_gpu_gets_dtype_auto_and_cuda_graphs_a_cpu_float32_and_eager():
    gpu, cpu = command(cuda=True), command(cuda=False)
    assert flag(gpu, "--dtype") == "auto" and "--enforce-eager" not in gpu
    assert flag(cpu, "--dtype") == "float32" and "--enforce-eager" in cpu


def test_a_cpu_prefills_every_prompt_whole_in_a_batch_budget_of_the_context(tmp_path):
    """vLLM 0.32's CPU worker crashed ("CPU Generator does not use offset") when a request with a seed was
    prefilled in chunks: SmolLM2's 530-token prompts with the calc agent's worked examples were."""
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 8192}')
    cpu = vllm_command("python", tmp_path, served_model_name="policy", host="127.0.0.1", port=8000, options=VllmOptions(), cuda=False)
    assert "--no-enable-chunked-prefill" in cpu and flag(cpu, "--max-num-batched-tokens") == "8192"
    assert flag(cpu, "--gpu-memory-utilization") == "0.3"  # vLLM's 0.92 of a shared 24 GB machine is not free
    assert flag(command(VllmOptions(max_model_len=1024), cuda=False), "--max-num-batched-tokens") == "2048"  # at least vLLM's default
    gpu = command(cuda=True)
    assert "--no-enable-chunked-prefill" not in gpu and "--gpu-memory-utilization" not in gpu


def test_options_given_win_over_the_device_defaults():
    argv = command(VllmOptions(dtype="bfloat16", enforce_eager=True, gpu_memory_utilization=0.4, max_model_len=8192), cuda=True)
    assert (flag(argv, "--dtype"), flag(argv, "--gpu-memory-utilization"), flag(argv, "--max-model-len")) == ("bfloat16", "0.4", "8192")
    assert "--enforce-eager" in argv


def test_tools_and_lora_switch_on_what_they_need():
    argv = command(cuda=False, tool_call_parser="hermes", lora_rank=4)
    assert "--enable-auto-tool-choice" in argv and flag(argv, "--tool-call-parser") == "hermes"
    assert "--enable-lora" in argv and flag(argv, "--max-lora-rank") == "8"  # vLLM accepts 1, 8, 16, ... only


@pytest.mark.parametrize(("rank", "served"), [(1, 1), (2, 8), (8, 8), (9, 16), (300, 320), (512, 512)])
def test_lora_ranks_round_up_to_one_vllm_accepts(rank, served):
    assert vllm_lora_rank(rank) == served


def test_a_rank_above_vllms_largest_is_named():
    with pytest.raises(ValueError, match="LoRA rank 600 is above vLLM's largest --max-lora-rank"):
        vllm_lora_rank(600)
