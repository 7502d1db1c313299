"""`tracerl model to-gguf` checked by the program the file is for: llama.cpp (what Ollama and LM Studio run).

test_to_gguf.py reads the file back with transformers' GGUF loader; this loads it in llama.cpp itself
(its prebuilt CPU binaries, through node-llama-cpp: tracerl_testing.llama_cpp) and asks what the folder
gives under transformers:

- llama.cpp's tokenizer (the pre-tokenizer the file names, its merges and added tokens) splits each
  text, ChatML markers included, into the folder's token ids;
- F16: its greedy continuation of each prompt is the folder's, token for token, and its log-probs (of
  the prompt's tokens and of the continuation) are the folder's within :data:`MAX_LOGPROB_GAP`;
- Q8_0: its log-probs of the prompts' tokens are the folder's within :data:`MAX_LOGPROB_GAP`.

Greedy decoding is compared on SmolLM2-135M-Instruct (a real Llama: llama.cpp's q/k permutation) and
the tiny Qwen2 (NeoX rope, no permutation), whose choices are clear. The tiny Llama, freshly
initialised, has steps whose two best tokens are 5e-5 apart, under F16's rounding: it is checked
through its Q8_0 log-probs only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tracerl.trainer.to_gguf import export_gguf

pytestmark = pytest.mark.slow

TEXTS = ["task: add 3 4 ; tool: add ; result: 7", "<|im_start|>user\nWhat is the larger of 9 and 2?<|im_end|>\n<|im_start|>assistant\n",
         "  spaces,  digits 0123 and é"]
STEPS = 12
# The largest |log-prob difference| to the folder allowed, in nats, over the prompts' tokens (and, where the
# greedy continuations agree, theirs). Measured: F16 1.1e-2 (SmolLM2, on log-probs down to -17), 1.1e-3 (tiny
# Qwen2); Q8_0 1.3e-2 (tiny Llama), 2.2e-2 (tiny Qwen2), 0.43 on SmolLM2 (by hand, not run here: a second export
# of it). A wrong layout (a missing permutation, a swapped tensor) is off by nats.
MAX_LOGPROB_GAP = {"f16": 5e-2, "q8_0": 1e-1}


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory) -> Path:
    from tracerl_testing.qwen2_model import build_qwen2_model

    return build_qwen2_model(tmp_path_factory.mktemp("qwen2") / "tiny-qwen2", seed=0)


def _transformers_reading(model: torch.nn.Module, prompt: list[int]) -> tuple[list[float], list[int], list[float]]:
    """Under transformers: the log-probs of ``prompt``'s tokens after their prefixes, its greedy continuation of
    STEPS tokens (never stopping at an end token: the llama.cpp side does not), and their log-probs."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        logprobs = torch.log_softmax(out.logits[0], dim=-1)
        scored = [float(logprobs[i, token]) for i, token in enumerate(prompt[1:])]
        greedy, greedy_logprobs = [], []
        for _ in range(STEPS):
            token = int(logprobs[-1].argmax())
            greedy.append(token)
            greedy_logprobs.append(float(logprobs[-1, token]))
            out = model(torch.tensor([[token]]), cache=out.cache, use_cache=True)
            logprobs = torch.log_softmax(out.logits[0], dim=-1)
    return scored, greedy, greedy_logprobs


@pytest.mark.parametrize(("model", "qtype"), [("smollm2", "f16"), ("tiny_qwen2", "f16"), ("tiny_qwen2", "q8_0"), ("tiny_llama", "q8_0")])
def test_llama_cpp_reads_the_written_file_as_transformers_reads_the_folder(
    model: str, qtype: str, request: pytest.FixtureRequest, tmp_path: Path,
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tracerl_testing.llama_cpp import read_with_llama_cpp, require_llama_cpp

    require_llama_cpp()
    folder = request.getfixturevalue({"smollm2": "smollm2_folder", "tiny_llama": "tiny_checkpoint"}.get(model, model))
    done = export_gguf(folder, tmp_path / f"{model}-{qtype}.gguf", qtype=qtype)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = [tokenizer(text)["input_ids"] for text in TEXTS]
    ours = read_with_llama_cpp(done.path, TEXTS, prompts, STEPS)

    assert ours.tokens == [tokenizer(text, add_special_tokens=False)["input_ids"] for text in TEXTS]
    theirs = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    gap, same = 0.0, 0
    for prompt, run in zip(prompts, ours.runs):
        logprobs, greedy, greedy_logprobs = _transformers_reading(theirs, prompt)
        if qtype == "f16":
            assert run.greedy == greedy, tokenizer.decode(prompt)
        gap = max(gap, *(abs(a - b) for a, b in zip(run.logprobs, logprobs, strict=True)))
        if run.greedy == greedy:
            same += 1
            gap = max(gap, *(abs(a - b) for a, b in zip(run.greedy_logprobs, greedy_logprobs, strict=True)))
    print(f"{model} {qtype} in llama.cpp {ours.release}: max |log-prob gap| {gap:.3g}, same greedy continuation {same}/{len(TEXTS)}")
    assert gap <= MAX_LOGPROB_GAP[qtype]
