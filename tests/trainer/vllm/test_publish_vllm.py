"""Publishing to a real ``vllm serve``: LoRA in place, and every bad case leaves vLLM serving what it served.

(The full-checkpoint reload that succeeds is the end-to-end test's, test_loop_on_vllm.py.)
"""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tracerl.trainer.publish import PublishError, VllmLora, VllmReload, publish
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.core.uvicorn_thread import serve_in_thread
from tracerl_testing.peft_adapter_runner import run_peft_adapter
from tracerl_testing.vllm_replies import lora_not_enabled_server

from .conftest import greedy_chat, peft_logprobs

pytestmark = pytest.mark.slow
PROMPT = "task: add 3 4"


def served_state(vllm) -> dict:
    """What agents get now, and whether vLLM holds them."""
    return {**greedy_chat(vllm.base_url, PROMPT), "paused": httpx.get(f"{vllm.url}/is_paused").json()["is_paused"]}


def test_lora_adapter_is_swapped_in_place_and_serves_what_peft_computes(vllm, vllm_python, start_model, tmp_path):
    publish(start_model, VllmReload(vllm.base_url), version=0)  # the base the adapters apply to, whatever ran before
    first, second = tmp_path / "lora-v1", tmp_path / "lora-v2"
    run_peft_adapter(vllm_python, "write", str(start_model), str(first), "1")
    run_peft_adapter(vllm_python, "write", str(start_model), str(second), "2")
    target = VllmLora(vllm.base_url, adapter_name="policy-lora")

    version = publish(first, target).policy_version
    one = greedy_chat(vllm.base_url, PROMPT, model="policy-lora")
    assert one["version"] == str(version)
    np.testing.assert_allclose(one["logprobs"], peft_logprobs(vllm_python, start_model, first, one["prompt_ids"], one["ids"]), atol=1e-4)

    assert publish(second, target).policy_version == version + 1  # same name, new weights (load_inplace)
    two = greedy_chat(vllm.base_url, PROMPT, model="policy-lora")
    assert two["version"] == str(version + 1)
    np.testing.assert_allclose(two["logprobs"], peft_logprobs(vllm_python, start_model, second, two["prompt_ids"], two["ids"]), atol=1e-4)
    assert not np.allclose(one["logprobs"], two["logprobs"], atol=1e-3)

    no_weights = tmp_path / "lora-no-weights"
    shutil.copytree(second, no_weights, ignore=shutil.ignore_patterns("*.safetensors"))
    with pytest.raises(PublishError, match="did not load .*it serves the previous adapter"):
        publish(no_weights, target)
    assert greedy_chat(vllm.base_url, PROMPT, model="policy-lora") == two



def test_two_adapters_on_one_vllm_are_two_policies_with_versions_of_their_own(vllm, vllm_python, start_model, tmp_path):
    publish(start_model, VllmReload(vllm.base_url), version=0)
    first, second = tmp_path / "lora-1", tmp_path / "lora-2"
    run_peft_adapter(vllm_python, "write", str(start_model), str(first), "1")
    run_peft_adapter(vllm_python, "write", str(start_model), str(second), "2")
    writer, checker = VllmLora(vllm.base_url, adapter_name="writer"), VllmLora(vllm.base_url, adapter_name="checker")

    assert publish(first, writer).policy_version == 1
    assert publish(first, checker).policy_version == 1
    assert publish(second, writer).policy_version == 2  # the writer moves on; the checker stays at 1
    as_writer, as_checker = greedy_chat(vllm.base_url, PROMPT, model="writer"), greedy_chat(vllm.base_url, PROMPT, model="checker")
    assert (as_writer["version"], as_checker["version"]) == ("2", "1")  # each answer says its own adapter's version
    np.testing.assert_allclose(as_writer["logprobs"], peft_logprobs(vllm_python, start_model, second, as_writer["prompt_ids"], as_writer["ids"]), atol=1e-4)
    np.testing.assert_allclose(as_checker["logprobs"], peft_logprobs(vllm_python, start_model, first, as_checker["prompt_ids"], as_checker["ids"]), atol=1e-4)
    assert greedy_chat(vllm.base_url, PROMPT)["version"] is None  # the base model: no policy's version

    too_wide = tmp_path / "lora-too-wide"  # an adapter vLLM refuses (rank above --max-lora-rank)
    shutil.copytree(second, too_wide)
    config = json.loads((too_wide / "adapter_config.json").read_text())
    (too_wide / "adapter_config.json").write_text(json.dumps({**config, "r": 64}))
    with pytest.raises(PublishError, match="did not load"):
        publish(too_wide, checker)
    assert greedy_chat(vllm.base_url, PROMPT, model="checker") == as_checker  # the checker serves what it served
    assert greedy_chat(vllm.base_url, PROMPT, model="writer") == as_writer

def test_a_rejected_checkpoint_puts_the_served_one_back_and_resumes(vllm, start_model, tmp_path):
    publish(start_model, VllmReload(vllm.base_url), version=0)
    before = served_state(vllm)
    no_weights = tmp_path / "no-weights"
    shutil.copytree(start_model, no_weights, ignore=shutil.ignore_patterns("*.safetensors"))

    with pytest.raises(PublishError, match=f"did not load {no_weights}: rejected it .*It serves {start_model} again"):
        publish(no_weights, VllmReload(vllm.base_url, served_checkpoint=start_model))
    assert served_state(vllm) == before  # same version, same weights (a half-loaded model would fail here), not paused
    assert (no_weights / "config.json").exists()


def slow_reload_proxy(upstream: str, delay_s: float) -> Starlette:
    """Forwards everything to vLLM; answers a reload ``delay_s`` after vLLM did (a reload too slow for its timeout)."""

    async def forward(request: Request) -> Response:
        async with httpx.AsyncClient(timeout=120) as client:
            reply = await client.request(
                request.method, f"{upstream}/{request.path_params['path']}", params=request.query_params,
                content=await request.body(), headers={"content-type": "application/json"},
            )
        if request.url.path == "/collective_rpc":
            await asyncio.sleep(delay_s)
        return Response(reply.content, status_code=reply.status_code, media_type=reply.headers.get("content-type"))

    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])


def test_a_reload_that_times_out_is_retried_then_the_served_checkpoint_comes_back(vllm, start_model, tmp_path):
    publish(start_model, VllmReload(vllm.base_url), version=0)
    before = served_state(vllm)
    other = build_tiny_model(tmp_path / "other", seed=2)
    with serve_in_thread(slow_reload_proxy(vllm.url, delay_s=1.5), name="slow-reload") as proxy:
        target = VllmReload(proxy, served_checkpoint=start_model, reload_timeout_s=0.5, retries=1)
        with pytest.raises(PublishError, match=r"timed out after 0.5 s \(2 tries; raise reload_timeout_s.*It serves .* again"):
            publish(other, target)
    assert served_state(vllm) == before  # vLLM did load `other` (twice), then `start_model` again, and resumed


def test_without_a_known_served_checkpoint_a_failed_reload_says_to_restart(vllm, start_model, tmp_path):
    publish(start_model, VllmReload(vllm.base_url), version=0)
    no_weights = tmp_path / "no-weights"
    shutil.copytree(start_model, no_weights, ignore=shutil.ignore_patterns("*.safetensors"))
    with pytest.raises(PublishError, match="restart `vllm serve` on the last good checkpoint"):
        publish(no_weights, VllmReload(vllm.base_url))
    publish(start_model, VllmReload(vllm.base_url), version=0)  # what the message asks, without the restart
    assert served_state(vllm)["paused"] is False


def test_vllm_without_dev_mode_is_named_with_the_fix(vllm_without_dev_mode, start_model, adapter_folder):
    for checkpoint, target in ((start_model, VllmReload(vllm_without_dev_mode.base_url)), (adapter_folder, VllmLora(vllm_without_dev_mode.base_url))):
        with pytest.raises(PublishError, match="started without VLLM_SERVER_DEV_MODE=1.*Restart it with VLLM_SERVER_DEV_MODE=1"):
            publish(checkpoint, target)
    assert greedy_chat(vllm_without_dev_mode.base_url, PROMPT)["version"] is None  # it still serves, unnumbered


def test_an_unreachable_endpoint_is_named(start_model, adapter_folder, unused_port_url):
    for checkpoint, target in ((start_model, VllmReload(unused_port_url)), (adapter_folder, VllmLora(unused_port_url))):
        with pytest.raises(PublishError, match="cannot reach vLLM at .*start `vllm serve` or pass its URL"):
            publish(checkpoint, target)


def test_a_full_checkpoint_is_not_sent_as_a_lora_adapter(start_model, unused_port_url):
    with pytest.raises(PublishError, match="is not what vLLM at .* loads \\(no adapter_config.json\\)"):
        publish(start_model, VllmLora(unused_port_url))


def test_lora_not_enabled_is_named_with_the_fix(adapter_folder):
    """Answered by a loopback server with vLLM's exact reply: a third vLLM start (~45 s) only for this is not worth it."""
    with lora_not_enabled_server() as url, pytest.raises(PublishError, match="LoRA is not enabled: start vLLM with --enable-lora"):
        publish(adapter_folder, VllmLora(url))
