"""`tracerl serve` as users start it: a real process, answering the OpenAI API on loopback."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

from tracerl.core.net import free_port


def test_tracerl_serve_answers_chat_and_stops_cleanly(tmp_path):
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "tracerl", "serve", "--port", str(port), "--served-model-name", "policy", "--policy-version", "3", "--max-model-len", "1024"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "tracerl serve did not come up"
            time.sleep(0.2)
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
        assert models["data"][0]["id"] == "policy" and models["data"][0]["max_model_len"] == 1024
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "return_token_ids": True},
        ).json()
        assert reply["model"] == "policy" and reply["policy_version"] == 3
        assert 1 <= len(reply["choices"][0]["token_ids"]) <= 3
    finally:
        process.terminate()
        returncode = process.wait(timeout=30)
        log.close()
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells why it stopped
    assert returncode in (0, -15)
    assert "Application shutdown complete" in (tmp_path / "serve.log").read_text()


def test_tracerl_serve_rejects_a_model_dir_that_is_not_a_checkpoint(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tracerl", "serve", "--model", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "no config.json" in result.stderr


def test_tracerl_serve_refuses_a_max_model_len_beyond_the_models_positions():
    result = subprocess.run(
        [sys.executable, "-m", "tracerl", "serve", "--max-model-len", "100000"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "--max-model-len" in result.stderr and "max_position_embeddings 4096" in result.stderr
