"""The retrieval-QA task: two-hop questions over the generated corpus, MuSiQue's format, the 0.9 F1 + 0.1 format reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.rag import task as rag

from tracerl.schemas import environment as E

SAMPLE = Path(__file__).parent / "data" / "musique_sample.jsonl"  # three lines in MuSiQue's format


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Corpus indexes are written under the test's own cache folder."""
    monkeypatch.setenv(E.CACHE_DIR_ENV, str(tmp_path / "cache"))


def test_every_question_needs_two_searches_and_the_first_alone_misleads():
    train, _ = rag.all_tasks(seed=0)
    corpus = rag.open_corpus(train[0]["corpus"])
    for task in train[:10]:
        org = task["question"].split("the founder of ")[1].split(" born?")[0].split(" attend?")[0]
        first = rag.search_output(corpus, org).splitlines()
        assert len(first) == rag.TOP_K and first[0].startswith(f"{org}: {org} is a ")
        assert task["answers"][0] not in first[0]  # the company's paragraph names its founder, not the answer
        founder = first[0].split(" by ")[1].split(".")[0]
        second = rag.search_output(corpus, founder).splitlines()
        assert second[0].startswith(f"{founder}: ") and task["answers"][0] in second[0]


def test_held_out_companies_are_never_trained_on_and_the_seed_decides_everything():
    train, held_out = rag.all_tasks(seed=0)
    assert len(train) + len(held_out) == 2 * len(rag.org_names())
    assert not {t["task_id"] for t in train} & {t["task_id"] for t in held_out}
    orgs = lambda tasks: {t["task_id"].split("-", 1)[1] for t in tasks}  # noqa: E731
    assert not orgs(train) & orgs(held_out)  # both questions about a company go to the same side
    assert {t["split"] for t in train} == {"train"} and {t["split"] for t in held_out} == {"test"}
    assert rag.all_tasks(seed=0) == (train, held_out)
    assert rag.all_tasks(seed=1)[1] != held_out
    assert rag.generated_world(0)[0] != rag.generated_world(1)[0]  # another seed, other founders and birthplaces


@pytest.mark.parametrize(
    ("reply", "answers", "expected"),
    [
        ("<answer>Lumora</answer>", ["Lumora"], 1.0),
        ("The founder was born there. <answer> lumora. </answer>", ["Lumora"], 1.0),  # normalised; text around is allowed
        ("<answer>Brisca</answer>", ["Lumora"], 0.1),  # right format, wrong answer
        ("Lumora", ["Lumora"], 0.0),  # no tags: nothing to score
        ("<answer>Lumora</answer><answer>Brisca</answer>", ["Lumora"], 0.0),  # two answers are none
        ("<answer> </answer>", ["Lumora"], 0.0),
        ("<answer>Aldwick University</answer>", ["Halberd University"], 0.1 + 0.9 * 0.5),  # word-level F1
        ("<answer>the University of Vienna</answer>", ["Universität Wien", "University of Vienna"], 1.0),  # best alias
        ("<answer>Tulsa</answer>", ["Tulsa, Oklahoma"], 0.1 + 0.9 * (2 * 1 * 0.5 / 1.5)),
    ],
)
def test_reward_is_nine_tenths_answer_f1_and_one_tenth_format(reply, answers, expected):
    assert rag.reward(reply, answers) == pytest.approx(expected)


def test_musique_paragraphs_become_the_corpus_and_answerable_questions_the_tasks():
    documents, tasks = rag.load_musique(SAMPLE)
    assert [t["task_id"] for t in tasks] == ["2hop__1001_2001", "2hop__1002_2002"]  # the unanswerable one is skipped
    assert tasks[0]["answers"] == ["Tulsa, Oklahoma", "Tulsa"]
    assert len(documents) == 5  # paragraphs shared between questions are indexed once
    train, held_out = rag.all_tasks(seed=0, data=SAMPLE)
    assert len(train) == 1 and len(held_out) == 1 and train[0]["corpus"] == held_out[0]["corpus"]
    corpus = rag.open_corpus(train[0]["corpus"])
    assert rag.search_output(corpus, "Mae Collier").splitlines()[0].startswith("Mae Collier: Mae Collier (born 1961)")


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def good_line(**changes) -> str:
    record = json.loads(SAMPLE.read_text().splitlines()[0])
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not None})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", r"line 2: not JSON .*one JSON object per line"),
        ("[1, 2]", r"line 2: a list, expected a JSON object"),
        (good_line(id="x", question=None), r"line 2: missing field 'question'"),
        (good_line(id="x", paragraphs="text"), r"line 2: field 'paragraphs' is a str, expected a list"),
        (good_line(id="x", paragraphs=[{"title": "T"}]), r"line 2, paragraphs\[0\]: missing field 'paragraph_text'"),
        (good_line(id="x", answer_aliases="Tulsa"), r"line 2: 'answer_aliases' must be a list of strings"),
        (good_line(), r"line 2: id '2hop__1001_2001' appears twice"),
    ],
)
def test_bad_musique_lines_are_named_by_file_and_line(tmp_path, bad, message):
    path = write_lines(tmp_path / "dev.jsonl", good_line(), bad)
    with pytest.raises(rag.DataFormatError, match=f"{path}, {message}"):
        rag.load_musique(path)


def test_a_file_without_answerable_questions_says_so(tmp_path):
    path = write_lines(tmp_path / "full.jsonl", good_line(answerable=False))
    with pytest.raises(rag.DataFormatError, match="no answerable question"):
        rag.load_musique(path)
    with pytest.raises(rag.DataFormatError, match="one answerable question; at least two are needed"):
        rag.all_tasks(seed=0, data=write_lines(tmp_path / "one.jsonl", good_line()))
