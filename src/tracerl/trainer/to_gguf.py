"""A Hugging Face folder (or base + LoRA adapter) as a GGUF file that llama.cpp, Ollama and LM Studio run (``tracerl model to-gguf``).

The file is written with the ``gguf`` package's own writer, in the layout llama.cpp's
``convert_hf_to_gguf.py`` gives the same architectures (learned from it, not copied):

- hyperparameters under ``{arch}.*`` (context, embedding and feed-forward lengths, blocks,
  heads and KV heads, RoPE base and dimension, RMS-norm epsilon, vocabulary size, file type);
- tensors renamed by gguf's own table (``gguf.get_tensor_name_map(MODEL_ARCH, blocks)``).
  For ``llama`` the q and k projections are permuted: Hugging Face's rotary embedding pairs
  dimension ``i`` with ``i + d/2`` of each head (rotate-half), llama.cpp's ``llama`` kernels pair
  ``2i`` with ``2i+1``, so each head's rows are interleaved (k by the KV heads' count). ``qwen2``
  uses llama.cpp's NeoX rope, which pairs as Hugging Face does: no permutation;
- 1-D tensors (norms, biases) as F32, the rest as F16 or Q8_0 (``gguf.quants.quantize``; a
  tensor whose rows do not split into Q8_0's 32-value blocks stays F16, as llama.cpp does);
- the byte-level BPE tokenizer: tokens (ids without a token padded as ``[PAD{i}]``), token
  types (added tokens that are special, or look it, as CONTROL, other added tokens as
  USER_DEFINED), the pre-tokenizer's llama.cpp name, and through gguf's ``SpecialVocab`` the
  merges, bos/eos/pad ids, add-bos/eos flags and the chat template.

Before the file is renamed into place it is read back by transformers' own GGUF loader (what
``tracerl model from-gguf`` uses): its token ids must equal the folder's on a few texts, and its
logits the folder's within :data:`MAX_LOGIT_GAP` of the type, relative to the logits' scale.
An Ollama ``Modelfile`` is written beside it. llama.cpp itself is not run here.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tracerl.core.storage import fsync_dir, fsync_file, write_atomic
from tracerl.trainer.training.model_folder import ADAPTER_CONFIG

# config.json's architecture -> (gguf.MODEL_ARCH member, whether q/k are permuted for llama.cpp's rope)
ARCHITECTURES = {"LlamaForCausalLM": ("LLAMA", True), "Qwen2ForCausalLM": ("QWEN2", False)}
TYPES = ("f16", "q8_0")
# The largest |logit difference| to the folder allowed, as a fraction of the folder's largest |logit| on the check
# texts. F16 rounds each weight by <= 2^-11 of itself, Q8_0 by <= 1/254 of its 32-value block's largest. Measured
# (max gap / scale): F16 5e-4 (tiny Llama), 7e-4 (tiny Qwen2), 1.1e-3 (SmolLM2-135M, 0.041 on logits up to 38.6);
# Q8_0 1.2e-2, 2.0e-2, 3.4e-2 (SmolLM2: 1.31). A wrong layout (a missing q/k permutation, a swapped tensor) is
# off by the logits' own scale, so these bounds, ~10x and ~3x above what rounding gives, still catch it.
MAX_LOGIT_GAP = {"f16": 1e-2, "q8_0": 1e-1}
CHECK_TEXTS = ("What is 17 + 25?", "Write one sentence about the sea.", "def add(a, b):\n    return a + b", "SELECT name FROM users;  -- 42")
MODELFILE = "Modelfile"


class ToGgufError(ValueError):
    """The folder cannot become a GGUF; the message names the file and what to do."""


@dataclass(frozen=True)
class GgufExport:
    path: Path
    modelfile: Path
    architecture: str  # the GGUF's general.architecture
    type: str  # f16 or q8_0
    tensors: int
    bytes: int
    pre_tokenizer: str
    template: str  # "translated" (ChatML) or "omitted" in the Modelfile
    max_logit_gap: float  # transformers' reading of the file vs the folder, over the check texts
    logit_scale: float
    bound: float  # the gap allowed: MAX_LOGIT_GAP[type] x logit_scale
    merged: dict | None  # what `tracerl model merge` measured, when an adapter was merged first
    seconds: float


def _config(folder: Path) -> dict:
    if not folder.is_dir():
        raise ToGgufError(f"{folder}: no such folder (pass a Hugging Face model folder)")
    if (folder / ADAPTER_CONFIG).is_file():
        raise ToGgufError(f"{folder} is a LoRA adapter ({ADAPTER_CONFIG}): pass its base model folder and --adapter {folder}")
    if not (folder / "config.json").is_file():
        raise ToGgufError(f"{folder} is not a model folder (no config.json): pass a Hugging Face model folder")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    architectures = config.get("architectures") or []
    if not any(a in ARCHITECTURES for a in architectures):
        raise ToGgufError(
            f"{folder / 'config.json'}: architectures {architectures} cannot be written as a GGUF here "
            f"(supported: {', '.join(ARCHITECTURES)}): use llama.cpp's convert_hf_to_gguf.py for other models"
        )
    return config


def pre_tokenizer_name(tokenizer_json: dict, where: Path) -> str:
    """llama.cpp's name (``tokenizer.ggml.pre``) for the way tokenizer.json splits text before BPE.

    GPT-2's own split (``ByteLevel`` with its regex) is ``gpt-2``; a ``Split`` regex followed by a
    plain ``ByteLevel`` is named from transformers' table of the regexes llama.cpp's names stand for
    (the table its GGUF loader reads them back with), so the file splits as the folder does.
    """
    pre = tokenizer_json.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space", False):
        return "gpt-2"
    parts = pre.get("pretokenizers") or []
    if pre.get("type") == "Sequence" and len(parts) == 2 and parts[0].get("type") == "Split" and parts[1].get("type") == "ByteLevel" \
            and not parts[1].get("use_regex", True):
        regex = (parts[0].get("pattern") or {}).get("Regex")
        try:
            from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
        except ImportError:
            GGUF_PRE_TOKENIZER_SPLITS = {}
        for name, split in GGUF_PRE_TOKENIZER_SPLITS.items():  # the first name of a regex is its usual one (qwen2, llama3)
            if split == regex:
                return name
    raise ToGgufError(
        f"{where}: its pre-tokenizer ({json.dumps(pre)[:200]}) is not one this writer can name for llama.cpp "
        "(GPT-2's ByteLevel split, or a Split regex transformers knows such as Qwen2's or Llama 3's): "
        "use llama.cpp's convert_hf_to_gguf.py, which names tokenizers by their hash"
    )


def _looks_special(token: str) -> bool:
    """Added tokens a model's config forgot to mark special (llama.cpp's own rule of thumb): <|...|>, <pad>, <mask>."""
    return (token.startswith("<|") and token.endswith("|>")) or token in ("<pad>", "<mask>")


def vocabulary(tokenizer, vocab_size: int) -> tuple[list[str], list[int]]:
    """Tokens and their gguf token types, id by id up to the model's ``vocab_size`` (as llama.cpp's converter lists them)."""
    import gguf

    reverse = {index: token for token, index in tokenizer.get_vocab().items()}
    added = tokenizer.get_added_vocab()
    decoder = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for index in range(vocab_size):
        if index not in reverse:
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        token = reverse[index]
        if token in added:
            if not decoder[index].normalized:  # llama.cpp matches added tokens in the text as written
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            types.append(gguf.TokenType.CONTROL if decoder[index].special or _looks_special(token) else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    return tokens, types


def _permute(weights, heads: int):
    """Hugging Face's rotate-half rows of each head as llama.cpp's interleaved pairs (llama.cpp's converter does the same)."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def _tensors(folder: Path):
    """(name, float32 numpy array) for every tensor in the folder's safetensors files."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ToGgufError(f"{folder} holds no *.safetensors weights: save the model with safe_serialization (the default), then convert")
    for file in files:
        with safe_open(file, framework="pt", device="cpu") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name).float().numpy()


def _rope_theta(config) -> float:
    parameters = getattr(config, "rope_parameters", None) or {}
    scaling = getattr(config, "rope_scaling", None) or {}
    kind = parameters.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise ToGgufError(f"rope scaling {kind!r}: this writer handles plain RoPE only; use llama.cpp's convert_hf_to_gguf.py")
    return float(parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def write_gguf(folder: Path, path: Path, qtype: str, name: str | None = None) -> tuple[str, int, str]:
    """Write the GGUF of ``folder`` to ``path`` (``general.name``: ``name``, else the folder's name).

    Returns (architecture, tensor count, pre-tokenizer).
    """
    import gguf
    import numpy as np
    from transformers import AutoConfig, AutoTokenizer

    config_json = _config(folder)
    arch_name, permute = next(ARCHITECTURES[a] for a in config_json["architectures"] if a in ARCHITECTURES)
    arch = gguf.MODEL_ARCH[arch_name]
    config = AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ToGgufError(f"{folder}: its tokenizer ({type(tokenizer).__name__}) has no tokenizers backend: "
                          "this writer takes a fast byte-level BPE tokenizer")
    # the pipeline transformers runs (its tokenizer class may set its own split over tokenizer.json's, as Qwen2's does)
    tokenizer_json = json.loads(backend.to_str())
    model_kind = (tokenizer_json.get("model") or {}).get("type")
    if model_kind != "BPE" or (tokenizer_json.get("decoder") or {}).get("type") != "ByteLevel":
        raise ToGgufError(f"{folder}: a {model_kind} tokenizer; this writer takes byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM2)")
    pre = pre_tokenizer_name(tokenizer_json, folder / "tokenizer.json")

    heads, kv_heads, hidden = config.num_attention_heads, config.num_key_value_heads, config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    blocks = config.num_hidden_layers
    file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[qtype]

    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name or folder.name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(hidden)
    writer.add_block_count(blocks)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != hidden // heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, types = vocabulary(tokenizer, config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=len(tokens))
    bos = tokenizer.bos_token_id
    special.add_special_token.setdefault("bos", bos is not None and tokenizer("a")["input_ids"][:1] == [bos])
    special.add_special_token.setdefault("eos", False)
    special.add_to_gguf(writer, quiet=True)

    names = gguf.get_tensor_name_map(arch, blocks)
    count = 0
    for name, data in _tensors(folder):
        if name.endswith(".rotary_emb.inv_freq"):  # recomputed from the RoPE base
            continue
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ToGgufError(f"{folder}: tensor {name!r} has no name in gguf's {gguf.MODEL_ARCH_NAMES[arch]} table: not converted")
        if permute and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = _permute(data, heads)
        elif permute and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = _permute(data, kv_heads)
        if data.ndim < 2:
            writer.add_tensor(mapped, data.astype(np.float32))
        elif qtype == "q8_0" and data.shape[-1] % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0] == 0:
            writer.add_tensor(mapped, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(mapped, data.astype(np.float16))
        count += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.MODEL_ARCH_NAMES[arch], count, pre


def _check(folder: Path, path: Path, qtype: str) -> tuple[float, float]:
    """(max |logit gap|, logit scale) of transformers' reading of ``path`` against ``folder``; token ids must be equal."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ours = AutoTokenizer.from_pretrained(folder)
    theirs = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    texts = list(CHECK_TEXTS)
    if getattr(ours, "chat_template", None):
        texts.append(ours.apply_chat_template([{"role": "user", "content": "What is 3 + 4?"}], add_generation_prompt=True, tokenize=False))
    for text in texts:
        if ours(text)["input_ids"] != theirs(text)["input_ids"]:
            raise ToGgufError(f"{path}: read back, its tokenizer splits {text[:60]!r} differently from {folder}'s: not written")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    read = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    gap = scale = 0.0
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([ours(text)["input_ids"]])
            want = model(ids).logits
            gap = max(gap, float((read(ids).logits - want).abs().max()))
            scale = max(scale, float(want.abs().max()))
    return gap, max(scale, 1.0)


_CHATML_TOOLS = """{{- if or .System .Tools }}<|im_start|>system
{{ if .System }}{{ .System }}{{ else }}You are a helpful AI assistant.{{ end }}
{{- if .Tools }}

You have these tools:
<tools>
{{- range .Tools }}
{{ .Function }}
{{- end }}
</tools>
To use a tool, reply with a call in this form, and nothing else:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>
{{- end }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ .Content }}
{{- range .ToolCalls }}
<tool_call>
{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
</tool_call>
{{- end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}"""

_CHATML = """{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if ne .Role "system" }}<|im_start|>{{ .Role }}
{{ .Content }}{{ if not (and $last (eq .Role "assistant")) }}<|im_end|>
{{ end }}
{{- end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}"""


def modelfile_text(gguf_name: str, chat_template: str | None, eos_token: str | None) -> tuple[str, str]:
    """The Ollama Modelfile beside the GGUF, and whether its TEMPLATE was "translated" or "omitted".

    A ChatML template (``<|im_start|>role ... <|im_end|>``, Qwen, SmolLM2, hermes tool calls) becomes
    Ollama's Go-template form of the same markup; any other is left out with a comment saying so.
    """
    lines = [f"# Ollama: ollama create NAME -f {MODELFILE}  (written by tracerl model to-gguf)", f"FROM ./{gguf_name}", ""]
    template = chat_template if isinstance(chat_template, str) else None
    if template and "<|im_start|>" in template and "<|im_end|>" in template:
        go = _CHATML_TOOLS if "<tool_call>" in template else _CHATML
        lines += ['TEMPLATE """' + go + '"""', 'PARAMETER stop "<|im_end|>"', 'PARAMETER stop "<|im_start|>"']
        return "\n".join(lines) + "\n", "translated"
    lines += [
        "# TEMPLATE omitted: the chat template is not ChatML (<|im_start|> ... <|im_end|>), the one form tracerl translates",
        "# to Ollama's Go templates. The GGUF carries it as tokenizer.chat_template; write a TEMPLATE by hand if Ollama",
        "# does not recognise it.",
    ]
    if eos_token:
        lines.append(f"PARAMETER stop {json.dumps(eos_token)}")
    return "\n".join(lines) + "\n", "omitted"


def export_gguf(
    folder: str | Path, out: str | Path, *, qtype: str = "f16", adapter: str | Path | None = None, force: bool = False,
) -> GgufExport:
    """``folder`` (with ``adapter`` merged in first, if given) as the GGUF ``out`` plus a Modelfile, checked, whole or not at all."""
    began = time.perf_counter()
    folder, out = Path(folder).expanduser(), Path(out).expanduser()
    if qtype not in TYPES:
        raise ToGgufError(f"--type {qtype!r}: use one of {', '.join(TYPES)}")
    if out.suffix != ".gguf":
        raise ToGgufError(f"{out}: name the output file *.gguf")
    modelfile = out.with_name(MODELFILE)
    if out.exists() and not force:
        raise ToGgufError(f"{out} exists: pass --force to replace it, or another OUT")
    if out.is_dir():
        raise ToGgufError(f"{out} is a folder: name a .gguf file to write")
    if modelfile.is_file() and not force and f"FROM ./{out.name}\n" not in modelfile.read_text(encoding="utf-8", errors="replace"):
        raise ToGgufError(f"{modelfile} exists and is another model's: pass --force to replace it, or write OUT into another folder")
    try:
        import gguf  # noqa: F401
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise ToGgufError(f"writing a GGUF needs {exc.name}: pip install 'tracerl[torch]'") from None
    hf_logging.disable_progress_bar()
    if adapter is None:
        _config(folder)  # a folder that is not a model, or of an architecture not mapped: said before any work
    out.parent.mkdir(parents=True, exist_ok=True)
    merged = None
    with tempfile.TemporaryDirectory(prefix=f".{out.stem}-", dir=out.parent) as scratch:
        source = folder
        if adapter is not None:
            from tracerl.trainer.merge import MergeError, merge_adapter

            try:
                done = merge_adapter(folder, adapter, Path(scratch) / "merged")
            except MergeError as exc:
                raise ToGgufError(str(exc)) from None
            merged = {k: v for k, v in asdict(done).items() if k != "path"}
            source = done.path
        partial = Path(scratch) / f"{out.stem}.gguf"
        try:
            architecture, count, pre = write_gguf(source, partial, qtype, name=out.stem)
        except OSError as exc:  # a full disk, a quota: the scratch folder goes, nothing is left half-written
            raise ToGgufError(f"{out}: writing the GGUF failed ({exc.strerror or exc}); nothing was written: make room in "
                              f"{out.parent} (the file takes about as much as the folder's weights at {qtype}) and run again") from None
        gap, scale = _check(source, partial, qtype)
        bound = MAX_LOGIT_GAP[qtype] * scale
        if gap > bound:
            raise ToGgufError(f"{out}: read back by transformers, its logits differ from {source}'s by {gap:.3g} "
                              f"(over {MAX_LOGIT_GAP[qtype]:g} x {scale:.3g} for {qtype}): not written")
        tokenizer = AutoTokenizer.from_pretrained(source)
        text, template = modelfile_text(out.name, tokenizer.chat_template, tokenizer.eos_token)
        fsync_file(partial)
        os.replace(partial, out)
        fsync_dir(out.parent)
    write_atomic(modelfile, text)
    return GgufExport(
        path=out, modelfile=modelfile, architecture=architecture, type=qtype, tensors=count, bytes=out.stat().st_size,
        pre_tokenizer=pre, template=template, max_logit_gap=gap, logit_scale=scale, bound=bound, merged=merged,
        seconds=round(time.perf_counter() - began, 2),
    )

