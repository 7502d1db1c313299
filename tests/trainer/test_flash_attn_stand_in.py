"""flash-attn's Python parts without its CUDA kernels (how tracerl's OpenRLHF install satisfies
OpenRLHF's import) break no model: importing tracerl.trainer puts a stand-in in their place.

On an H100 without the stand-in every model class failed to import (``Could not import module
'LlamaConfig'``), since transformers imports flash_attn there to see whether it is available.
"""

from __future__ import annotations

import subprocess
import sys

from tracerl.trainer.flash_attn_stand_in import FLASH_ATTN_KERNELS, STAND_IN_MARK
from tracerl_testing.installed import OPENRLHF_HOW, require

# importing tracerl.trainer (above) installed the stand-in if, and only if, this machine needs it: flash-attn
# without its kernels, as .ci/run installs it (where the kernels are built, there is nothing to stand in)
require(getattr(sys.modules.get(FLASH_ATTN_KERNELS), STAND_IN_MARK, False), "flash-attn without its CUDA kernels", OPENRLHF_HOW)

PROBE = f"""
import sys, tracerl.trainer, tracerl.trainer.flash_attn_stand_in as stand_in
from transformers import LlamaConfig, Qwen2ForCausalLM
import flash_attn.bert_padding
kernels = sys.modules[{FLASH_ATTN_KERNELS!r}]
assert kernels.__file__ == stand_in.__file__, kernels.__file__
assert not stand_in.kernels_built()
import torch
from tracerl.trainer.training.device import attention_implementation
assert attention_implementation(torch.device("cuda")) == "sdpa"  # what a GPU without the kernels trains with
try:
    kernels.fwd
except AttributeError as exc:
    print(exc)
"""


def test_models_and_flash_attns_python_parts_import_and_a_kernel_call_says_why_it_cannot_run():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "flash-attn's CUDA kernels are not built here" in done.stdout
