"""The retrieval-QA agent's recipe: its tasks, and the format its starting policy learns."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from agents.models.chatcmpl_converter import Converter

from examples.rag import task as rag
from examples.rag.agent import search_tool
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.recipe import AgentRecipe, FormatExample, Task, WarmStartStage
from tracerl.trainer.serving import tool_parser
from tracerl.trainer.training.config import TrainConfig


def search_call(query: str) -> str:
    """A search call as the model writes it (the form the policy server parses into ``tool_calls``)."""
    return tool_parser.render([{"function": {"name": rag.TOOL_NAME, "arguments": {"query": query}}}])


def warm_start(train: list[Task], seed: int, episodes: int = 800) -> list[WarmStartStage]:
    """Teach the format, not the task: search for a random title, maybe search again, answer a random answer.

    Queries are titles of random corpus documents and answers those of random training
    tasks, whatever the question asks: the starting policy writes well-formed calls and
    answers but has no reason to pick the right ones. Half of the episodes search twice,
    so that a second hop is a move the policy already knows how to make.
    """
    rng = random.Random(seed)
    corpus = rag.open_corpus(train[0]["corpus"])
    try:
        titles = [title for (title,) in corpus.execute("SELECT title FROM documents ORDER BY doc_id").fetchall()]
        answers = sorted({task["answers"][0] for task in train})
        tools = [Converter.tool_to_openai(search_tool(corpus))]  # the tool list exactly as the SDK sends it
        examples = []
        for _ in range(episodes):
            question = rng.choice(train)["question"]
            searches: list[tuple[str, str]] = []
            for _ in range(rng.choice((1, 2))):
                query = rng.choice(titles)
                examples.append(FormatExample(rag.after_searches(question, searches), search_call(query), tools))
                searches.append((query, rag.search_output(corpus, query)))
            examples.append(FormatExample(rag.after_searches(question, searches), rag.answer_text(rng.choice(answers)), tools))
    finally:
        corpus.close()
    return [WarmStartStage(examples, max_epochs=4, stop_below_loss=0.05)]


def _tokenizer_corpus() -> tuple[str, ...]:
    """The prompts' and replies' words (one generated world's paragraphs and questions, the formats)."""
    documents, tasks = rag.generated_world(0)
    calls = [search_call(title) for title in (d.title for d in documents)]
    answers = [rag.answer_text(answer) for answer in (*rag.CITIES, *rag.UNIVERSITIES)]
    return (*[rag.INSTRUCTIONS] * 8, *(f"{d.title}: {d.text}" for d in documents), *(t["question"] for t in tasks), *calls, *answers)


def tasks(seed: int, data: Path | None) -> tuple[list[Task], list[Task]]:
    return rag.all_tasks(seed, data)


RECIPE = AgentRecipe(
    name="rag",
    title="retrieval QA (OpenAI Agents SDK, BM25 in DuckDB)",
    agent_argv=(sys.executable, "-m", "examples.rag.agent"),
    tasks=tasks,
    warm_start=warm_start,
    tokenizer_corpus=_tokenizer_corpus(),
    sends_tools=True,
    version=1,
    defaults=LocalConfig(
        out=Path("runs/rag"), rounds=8, tasks_per_round=16, group_size=4, eval_tasks=24, tool_call_parser="hermes",
        tiny_learning_rate=1e-3, train=TrainConfig(epochs=2, minibatch_size=32),
    ),
)
