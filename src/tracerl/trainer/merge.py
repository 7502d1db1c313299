"""A LoRA adapter merged into its base: a full-weights Hugging Face folder that any server takes (``tracerl model merge``).

LoRA rounds write PEFT adapters (``adapter_config.json``); vLLM serves them only with
``--enable-lora``, and llama.cpp, Ollama and plain transformers not at all. Merging folds
``scale * B @ A`` into each adapted weight with peft's own ``merge_and_unload``, so the result
is the base architecture with new weights.

Nothing is written unless it is right:

- the adapter must fit the base: the base it names (``base_model_name_or_path``), when that
  is a folder here, must have the same shapes; peft's own size-mismatch error is caught and
  explained; every tensor in the adapter file must land in the base (peft alone skips a
  layer the base lacks) and every LoRA layer of the base must get one;
- the merged model's logits on a few token sequences must equal base+adapter's (float32,
  :data:`MAX_MERGE_GAP` relative to the logits' scale), and the folder as written and reloaded
  must give the merged model's logits (in the dtype it is written in: the base's own);
- the folder is written under a hidden name beside ``out`` and renamed into place, so a
  failure leaves nothing; an existing ``out`` is replaced only when asked (``force``).

The tokenizer files and chat template are copied from the adapter folder when it has them
(tracerl's trainer saves the tokenizer beside each adapter), else from the base.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from tracerl.trainer.training.checkpoint import checkpoint_folder
from tracerl.trainer.training.model_folder import ADAPTER_CONFIG

MARKER = "tracerl-merge.json"  # written into the folder: what it was made from and what the check measured
CHECK_TEXTS = ("What is 17 + 25?", "Write one sentence about the sea.", "def add(a, b):\n    return a + b", "SELECT name FROM users;")
# float32 rounding of W + s*B@A against W x + s*B(A x): ~1e-6 of the logits' scale; a wrong merge is off by O(1)
MAX_MERGE_GAP = 1e-4
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
    "tokenizer.model", "spiece.model", "vocab.txt", "chat_template.jinja", "chat_template.json",
)
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
SHAPE_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size")
DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


class MergeError(ValueError):
    """The adapter cannot be merged into the base; the message names the file and what to do."""


@dataclass(frozen=True)
class MergedFolder:
    """A merged folder and what its checks measured."""

    path: Path
    base: str
    adapter: str
    architecture: str
    dtype: str  # the weights' on disk: the base's
    tokenizer_from: str  # "adapter" or "base"
    max_merge_gap: float  # merged (float32, in memory) vs base+adapter, max |logit difference| over the check sequences
    max_written_gap: float  # the folder as written and reloaded vs base+adapter (includes rounding to ``dtype``)
    logit_scale: float  # max |logit| of base+adapter on the check sequences
    sequences: int
    parameters: int
    seconds: float


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MergeError(f"{path}: not readable as {what} ({exc})") from None


def check_base(base: Path) -> dict:
    """``base``'s config.json, once it is known to be a full model folder."""
    if not base.is_dir():
        raise MergeError(f"{base}: no such folder (BASE is the full model's Hugging Face folder, the one the adapter was trained on)")
    if (base / ADAPTER_CONFIG).is_file():
        raise MergeError(f"{base} is a LoRA adapter ({ADAPTER_CONFIG}), not a full model: pass the base model first, then the adapter")
    if not (base / "config.json").is_file():
        raise MergeError(f"{base} is not a model folder (no config.json): pass the Hugging Face folder of the base model")
    config = _read_json(base / "config.json", "a model config")
    if not any(base.glob("*.safetensors")) and not any(base.glob("*.bin")):
        raise MergeError(f"{base} has a config.json but no weights (*.safetensors): a pruned checkpoint? pass a folder that holds its weights")
    return config


def check_adapter(adapter: Path, base: Path, base_config: dict) -> dict:
    """``adapter``'s adapter_config.json, once it is known to be a LoRA adapter that may fit ``base``."""
    if not adapter.is_dir():
        raise MergeError(f"{adapter}: no such folder (ADAPTER is the PEFT LoRA adapter folder a LoRA round wrote)")
    if not (adapter / ADAPTER_CONFIG).is_file():
        what = "a full model (config.json): nothing to merge, serve it as it is" if (adapter / "config.json").is_file() else "not a PEFT adapter"
        raise MergeError(f"{adapter} has no {ADAPTER_CONFIG}: it is {what}")
    config = _read_json(adapter / ADAPTER_CONFIG, "a PEFT adapter config")
    if config.get("peft_type", "LORA") != "LORA":
        raise MergeError(f"{adapter / ADAPTER_CONFIG}: peft_type {config.get('peft_type')!r}; tracerl merges LoRA adapters only")
    if config.get("task_type") not in (None, "CAUSAL_LM"):
        raise MergeError(f"{adapter / ADAPTER_CONFIG}: task_type {config['task_type']!r}, not a causal LM's adapter")
    named = config.get("base_model_name_or_path")
    if named and Path(named).expanduser().is_dir() and Path(named).expanduser().resolve() != base.resolve():
        other = Path(named).expanduser()
        if (other / "config.json").is_file():
            theirs = _read_json(other / "config.json", "a model config")
            differ = [f"{k} {theirs.get(k)} there, {base_config.get(k)} in BASE" for k in SHAPE_KEYS if theirs.get(k) != base_config.get(k)]
            if differ:
                raise MergeError(
                    f"{adapter / ADAPTER_CONFIG} names base_model_name_or_path {named}, a different model from {base} "
                    f"({'; '.join(differ)}): pass {named} as BASE, or the adapter trained on {base}"
                )
    return config


def _tokenizer_source(base: Path, adapter: Path) -> tuple[Path, str]:
    if (adapter / "tokenizer_config.json").is_file():
        return adapter, "adapter"
    if (base / "tokenizer_config.json").is_file():
        return base, "base"
    raise MergeError(f"neither {adapter} nor {base} holds a tokenizer (tokenizer_config.json): save the base's tokenizer into {base}")


def _copy_tokenizer(source: Path, other: Path, into: Path) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, into / name)
    config = _read_json(into / "tokenizer_config.json", "a tokenizer config")
    has_template = any((into / n).is_file() for n in CHAT_TEMPLATE_FILES) or "chat_template" in config
    if not has_template:  # a tokenizer saved without its template: the other folder's, if it has one
        for name in CHAT_TEMPLATE_FILES:
            if (other / name).is_file():
                shutil.copy2(other / name, into / name)


def check_sequences(tokenizer) -> list[list[int]]:
    """The token sequences the merge is checked on: a few texts, and a chat turn when the tokenizer has a template."""
    sequences = [tokenizer(text)["input_ids"] for text in CHECK_TEXTS]
    if getattr(tokenizer, "chat_template", None):
        chat = [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": "7"}]
        sequences.append(list(tokenizer.apply_chat_template(chat, tokenize=True, return_dict=True)["input_ids"]))
    return [s for s in sequences if s]


def _logits(model, sequences: list[list[int]]) -> list:
    import torch

    with torch.no_grad():
        return [model(torch.tensor([ids])).logits[0].float() for ids in sequences]


def _gap(a: list, b: list) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _load_adapted(base: Path, adapter: Path, adapter_config: dict):
    """base (float32) + adapter through peft, after checking every adapter tensor landed; errors explained."""
    import torch
    from peft import PeftModel
    from peft.utils import get_peft_model_state_dict, load_peft_weights
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    except Exception as exc:
        raise MergeError(f"{base}: transformers cannot load it as a causal LM ({type(exc).__name__}: {str(exc)[:300]})") from None
    named = adapter_config.get("base_model_name_or_path")
    trained_on = f" (its {ADAPTER_CONFIG} names base_model_name_or_path {named})" if named else ""
    try:
        with warnings.catch_warnings():  # peft asks a deprecated transformers property on every load
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            adapted = PeftModel.from_pretrained(model, adapter).eval()
    except RuntimeError as exc:  # torch's load_state_dict: "size mismatch for ...: copying a param with shape ..."
        first = next((line.strip() for line in str(exc).splitlines() if "size mismatch" in line), str(exc)[:300]).rstrip(".")
        raise MergeError(
            f"{adapter} does not fit {base}: its LoRA weights have other shapes than the base's layers{trained_on}; "
            f"peft says: {first}. Pass the base model the adapter was trained on"
        ) from None
    except ValueError as exc:  # "Target modules {...} not found in the base model"
        raise MergeError(
            f"{adapter} does not fit {base}{trained_on}: peft says: {str(exc)[:400]}. Pass the base model the adapter was trained on"
        ) from None
    saved = load_peft_weights(str(adapter), device="cpu")
    loaded = get_peft_model_state_dict(adapted)
    extra, missing = sorted(set(saved) - set(loaded)), sorted(set(loaded) - set(saved))
    if extra or missing:
        which = f"{len(extra)} of its tensors have no layer in the base (e.g. {extra[0]})" if extra else \
            f"{len(missing)} LoRA weights the base's layers need are not in it (e.g. {missing[0]})"
        raise MergeError(f"{adapter} does not fit {base}{trained_on}: {which}. Pass the base model the adapter was trained on")
    return adapted


def _base_dtype(config: dict) -> str:
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32").removeprefix("torch.")
    return DTYPES.get(name, "float32")


def merge_adapter(base: str | Path, adapter: str | Path, out: str | Path, *, force: bool = False) -> MergedFolder:
    """Merge the LoRA ``adapter`` into ``base`` and write the full-weights folder ``out``, checked, whole or not at all."""
    began = time.perf_counter()
    base, adapter, out = Path(base).expanduser(), Path(adapter).expanduser(), Path(out).expanduser()
    base_config = check_base(base)
    adapter_config = check_adapter(adapter, base, base_config)
    if out.exists() or out.is_symlink():
        inputs = (base.resolve(), adapter.resolve())
        if any(path == out.resolve() or path.is_relative_to(out.resolve()) for path in inputs):
            raise MergeError(f"{out} is (or holds) an input of the merge: write the merged model to another folder")
        if not force:
            raise MergeError(f"{out} exists: pass --force to replace it, or another OUT")
        if not out.is_dir():
            raise MergeError(f"{out} exists and is not a folder: remove it, or pass another OUT")
    try:
        import peft  # noqa: F401
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise MergeError(f"merging needs {exc.name}: pip install 'tracerl[torch]' peft") from None
    hf_logging.disable_progress_bar()

    source, tokenizer_from = _tokenizer_source(base, adapter)
    tokenizer = AutoTokenizer.from_pretrained(source)
    sequences = check_sequences(tokenizer)
    adapted = _load_adapted(base, adapter, adapter_config)
    reference = _logits(adapted, sequences)
    scale = max(1.0, max(float(r.abs().max()) for r in reference))
    try:
        merged = adapted.merge_and_unload()
    except Exception as exc:
        raise MergeError(f"{adapter}: peft could not merge it into {base} ({type(exc).__name__}: {str(exc)[:300]})") from None
    merge_gap = _gap(_logits(merged, sequences), reference)
    if merge_gap > MAX_MERGE_GAP * scale:
        raise MergeError(f"merging {adapter} into {base}: the merged model's logits differ from base+adapter's by {merge_gap:.3g} "
                         f"(over {MAX_MERGE_GAP:g} x {scale:.3g}): not written")
    dtype = _base_dtype(base_config)
    out.parent.mkdir(parents=True, exist_ok=True)
    with checkpoint_folder(out) as partial:  # a hidden folder beside OUT, renamed into place at the end; removed on any error
        with torch.no_grad():  # the weights rounded to the dtype they are written in, held in float32 (buffers such as RoPE's stay)
            for parameter in merged.parameters():
                parameter.copy_(parameter.to(getattr(torch, dtype)).float())
        expected = _logits(merged, sequences)  # what the reloaded folder must give
        parameters = sum(p.numel() for p in merged.parameters())
        merged.to(getattr(torch, dtype))
        merged.save_pretrained(partial)
        _copy_tokenizer(source, base if tokenizer_from == "adapter" else adapter, partial)
        del merged, adapted
        written = AutoModelForCausalLM.from_pretrained(partial, dtype=torch.float32).eval()
        reloaded = AutoTokenizer.from_pretrained(partial)
        if check_sequences(reloaded) != sequences:
            raise MergeError(f"{partial}: the copied tokenizer splits the check texts differently from {source}'s: not written")
        written_logits = _logits(written, sequences)
        reload_gap = _gap(written_logits, expected)
        if reload_gap > MAX_MERGE_GAP * scale:
            raise MergeError(f"{out}: the written folder's logits differ from the merged model's by {reload_gap:.3g}: not written")
        result = MergedFolder(
            path=out, base=str(base), adapter=str(adapter), architecture=", ".join(base_config.get("architectures") or ["?"]),
            dtype=dtype, tokenizer_from=tokenizer_from, max_merge_gap=merge_gap, max_written_gap=_gap(written_logits, reference),
            logit_scale=scale, sequences=len(sequences), parameters=parameters, seconds=round(time.perf_counter() - began, 2),
        )
        (partial / MARKER).write_text(json.dumps({**asdict(result), "path": None}, indent=2) + "\n")
    return result
