"""The recipe's warm start teaches the format only: which column a question's word means is an
arbitrary preference per word, never the task's answer, and held-out questions are never taught."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from examples.sql import task as sql
from examples.sql.recipe import column_preferences, kept_format, tasks, warm_start

from tracerl.schemas import environment as E


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(E.CACHE_DIR_ENV, str(tmp_path / "cache"))


def user_question(messages: list[dict]) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def test_warm_start_queries_restate_the_word_then_query_a_column_of_its_table_on_training_questions_only():
    train, held_out = tasks(0, None)
    restatements, _, mixed = warm_start(train, seed=0, n=600)
    by_question = {t["question"]: sql.Task(**t) for t in train}
    held_out_questions = {t["question"] for t in held_out}
    right, queries, verdicts = 0, 0, Counter()
    for example in mixed.examples:
        question = user_question(example.messages)
        assert question not in held_out_questions
        if example.messages[0]["content"].startswith("Check"):
            verdicts[example.target] += 1
            continue
        task = by_question[question]
        word = sql.asked_attribute(question)
        if not example.ends_turn:  # a restatement, the query's first words
            assert example.target == f"SELECT /* {word} */"
            continue
        queries += 1
        # the format: the word in a comment, one column of the table that has it, the question's value in WHERE; the query runs
        _, _, note, _, column, _, table, *_ = example.target.split()
        assert note == word
        assert column in sql.read_schema(task.db_path)[table]
        assert example.target == sql.query_text(table, column, task.where_value, note=word)
        sql.execute(task.db_path, example.target)
        right += sql.reward(task, example.target)
    # about one query in five is right, as often as the starting policy is
    assert 0.1 < right / queries < 0.35
    assert set(verdicts) == set(sql.VERDICTS) and min(verdicts.values()) > 0.35 * sum(verdicts.values())
    assert all(not e.ends_turn for e in restatements.examples)


def test_which_column_a_word_gets_is_an_arbitrary_preference_that_differs_by_word_and_seed():
    train, _ = tasks(0, None)
    _, _, mixed = warm_start(train, seed=0, n=1200)
    columns_by_word: dict[str, Counter] = defaultdict(Counter)
    for example in mixed.examples:
        if example.ends_turn and example.target.startswith("SELECT"):
            columns_by_word[sql.asked_attribute(user_question(example.messages))][example.target.split()[4]] += 1
    favourites = {word: counts.most_common(1)[0][0] for word, counts in columns_by_word.items()}
    assert len(favourites) == 14
    # the favourite column is the right one for some words only, not a rule the policy could follow
    right = {c.synonym: c.name for tables in sql.DATABASES.values() for t in tables for c in t.columns}
    assert 0 < sum(favourites[w] == right[w] for w in favourites) < 14
    # each word's queries follow its own preference (a uniform choice would match about 1 word in 4)
    preferences = column_preferences(0)
    preferred = {word: max(weights, key=weights.get)[1] for word, weights in preferences.items()}
    assert sum(favourites[w] == preferred[w] for w in favourites) >= 8
    assert column_preferences(0) == preferences != column_preferences(1)


def test_replayed_each_round_restated_words_and_the_untrained_checkers_random_verdicts():
    train, _ = tasks(0, None)
    replay = kept_format(train, seed=0)
    verdicts = [e for e in replay if e.messages[0]["content"].startswith("Check")]
    restatements = [e for e in replay if e not in verdicts]
    counts = Counter(e.target for e in verdicts)
    assert set(counts) == set(sql.VERDICTS) and min(counts.values()) > 0.35 * len(verdicts)
    assert restatements and all(
        not e.ends_turn and e.target == f"SELECT /* {sql.asked_attribute(user_question(e.messages))} */" for e in restatements
    )


def test_spider_data_without_a_pretrained_model_is_refused_with_what_to_do():
    spider_like = [sql.Task("s-0", "x", "/nonexistent.sqlite", "How many heads are there?", "SELECT count(*) FROM head").to_json()]
    with pytest.raises(ValueError, match="pass --model"):
        warm_start(spider_like, seed=0)


def test_with_a_policy_per_agent_group_each_adapter_replays_its_own_agents_turns_only():
    """The writer's adapter is not taught the checker's verdicts, nor the checker's the writer's queries."""
    from types import SimpleNamespace

    from examples.sql.recipe import RECIPE
    from tracerl.orchestration.local.run import format_replay_samples
    from tracerl.trainer.tiny_model import build_tokenizer

    train, _ = tasks(0, None)
    trainer = SimpleNamespace(tokenizer=build_tokenizer())  # the replay needs only the policy's tokenizer
    cfg = RECIPE.defaults
    assert {e.agent for e in kept_format(train, 0)} == {"writer", "rewriter", "checker"}
    every = format_replay_samples(RECIPE, trainer, train, cfg)
    writer = format_replay_samples(RECIPE, trainer, train, cfg, ("writer", "rewriter"))
    checker = format_replay_samples(RECIPE, trainer, train, cfg, ("checker",))
    assert len(writer) + len(checker) == len(every) and writer and checker
    verdicts = {f"{v}<|end|>" for v in sql.VERDICTS}
    answer = lambda sample: trainer.tokenizer.decode(sample.response_token_ids)  # noqa: E731
    assert all(answer(s) in verdicts for s in checker) and not any(answer(s) in verdicts for s in writer)
