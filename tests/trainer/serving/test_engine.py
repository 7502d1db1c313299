"""The decoding engine behind the server, used directly: shutdown never strands a caller."""

from __future__ import annotations

import asyncio

import pytest

from tracerl.trainer.serving.engine import GenerationEngine, GenerationError, SamplingParams
from tracerl.trainer.tiny_model import ensure_tiny_model


def test_stopping_fails_running_requests_and_a_pending_reload_instead_of_hanging():
    engine = GenerationEngine(ensure_tiny_model())

    async def main():
        handle = engine.submit([[2, 70, 5, 3]], SamplingParams(max_tokens=480, ignore_eos=True))
        await handle.admitted()
        reload = asyncio.get_running_loop().run_in_executor(None, engine.load_weights, ensure_tiny_model())
        while not engine.reload_pending and not reload.done():  # the reload waits for the running request
            await asyncio.sleep(0.01)
        await asyncio.get_running_loop().run_in_executor(None, engine.stop)
        with pytest.raises(GenerationError, match="shut"):
            await reload
        with pytest.raises(GenerationError, match="shutting down"):
            await handle.results()

    asyncio.run(main())
    assert engine.policy_version == 0
