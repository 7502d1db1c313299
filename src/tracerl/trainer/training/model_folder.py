"""What a ``--model`` folder holds, checked before any weights load, with a message that says what to change.

A policy is a Hugging Face folder of a causal LM (full weights), or a PEFT LoRA adapter
(``adapter_config.json``) on such a model: the checkpoints LoRA rounds write. An adapter is
trained further as the same adapter (rounds chain), never mistaken for a full model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"


class ModelFolderError(ValueError):
    """The folder cannot be a policy; the message names it and what to pass instead."""


@dataclass(frozen=True)
class PolicyFolder:
    path: Path
    base: str  # the full model's folder or hub id (the folder itself unless it is an adapter)
    adapter: Path | None  # the LoRA adapter to continue training, if the folder is one
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: list[str] | str | None = None

    @property
    def is_adapter(self) -> bool:
        return self.adapter is not None


def inspect_policy_folder(path: str | os.PathLike) -> PolicyFolder:
    """Classify ``path``; raise :class:`ModelFolderError` for anything that is not a causal LM or an adapter of one."""
    folder = Path(path)
    if not folder.is_dir():
        raise ModelFolderError(f"--model {folder}: no such folder (a Hugging Face model folder, or a LoRA adapter a LoRA round wrote)")
    if (folder / ADAPTER_CONFIG).is_file():
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        base = config.get("base_model_name_or_path")
        if not base:
            raise ModelFolderError(f"--model {folder} is a LoRA adapter without base_model_name_or_path in {ADAPTER_CONFIG}: add the base model's folder there")
        if config.get("task_type") not in (None, "CAUSAL_LM"):
            raise ModelFolderError(f"--model {folder} is a LoRA adapter for {config.get('task_type')}, not a causal LM")
        return PolicyFolder(folder, str(base), folder, int(config.get("r", 8)), int(config.get("lora_alpha", 16)), config.get("target_modules"))
    if not (folder / "config.json").is_file():
        raise ModelFolderError(f"--model {folder} is not a Hugging Face checkpoint (no config.json, no {ADAPTER_CONFIG})")
    check_causal_lm(folder)
    return PolicyFolder(folder, str(folder), None)


def check_causal_lm(folder: Path) -> None:
    """The folder's config names an architecture with a language-modelling head."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    architectures = config.get("architectures") or []
    if architectures and not any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in architectures):
        raise ModelFolderError(
            f"--model {folder} is a {', '.join(architectures)}, not a causal LM: tracerl trains models that generate text "
            "(an *ForCausalLM checkpoint, e.g. an instruct model)"
        )
