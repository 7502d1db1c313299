"""``pip install tracerl`` in an agent's environment is capture only, and capture works there.

A fresh venv gets this checkout without extras (and the OpenAI SDK, the agent's own
dependency); an agent run with ``tracerl run`` records its calls with exact token ids, while
the pipeline, collector and trainer modules are absent and their commands say which extra to
install.
"""

from __future__ import annotations

import subprocess

import pytest

from tracerl_testing.installs import AGENT_MODULES_ABSENT, REPO, importable, install_venv

pytestmark = pytest.mark.slow

AGENT = """
import os, openai
client = openai.OpenAI(base_url=os.environ["BASE_URL"])
reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2?"}])
print("ANSWER", reply.choices[0].message.content)
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    return install_venv(tmp_path_factory.mktemp("bare") / "venv", "tracerl", "openai")


def test_the_bare_install_holds_none_of_the_other_parts(bare_python):
    assert importable(bare_python, AGENT_MODULES_ABSENT) == []
    assert importable(bare_python, ("opentelemetry.sdk", "pyarrow", "tracerl.instrumentation")) == ["opentelemetry.sdk", "pyarrow", "tracerl.instrumentation"]


def test_an_agent_run_with_the_bare_install_is_captured_with_exact_tokens(bare_python, captured, server):
    done = captured.tracerl_run(AGENT, "--task-id", "t1", python=str(bare_python))
    assert done.returncode == 0, done.stderr
    assert "ANSWER" in done.stdout
    [call] = captured.llm_calls()
    [truth] = server.calls
    assert (call["prompt_token_ids"], call["completion_token_ids"], call["task_id"]) == (truth.prompt_token_ids, truth.token_ids, "t1")


def test_python_started_in_the_checkout_imports_the_installed_package(bare_python):
    """The checkout's folders never shadow an install that is not editable (src layout)."""
    probe = "import tracerl, tracerl.instrumentation; print(tracerl.__file__)"
    done = subprocess.run([str(bare_python), "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(bare_python.parents[1])), done.stdout


@pytest.mark.parametrize(("command", "extra"), [
    (["tracerl", "pipeline", "build-dataset", "data"], "pipeline"),
    (["tracerl", "collector", "serve", "--out", "data"], "collector"),
    (["tracerl", "gateway", "--upstream", "http://127.0.0.1:1"], "collector"),
    (["tracerl", "train", "--help"], "torch"),
    (["tracerl", "policy", "list"], "train"),
    (["pipeline", "doctor", "data"], "pipeline"),
])
def test_a_command_of_another_part_says_which_extra_to_install(bare_python, command, extra):
    done = subprocess.run([str(bare_python.parent / command[0]), *command[1:]], capture_output=True, text=True, timeout=60,
                          cwd=bare_python.parent)
    assert done.returncode != 0
    assert f"pip install 'tracerl[{extra}]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
