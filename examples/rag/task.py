"""The retrieval-QA task: multi-hop questions over a corpus searched with BM25, and their reward.

It is the paper's MuSiQue agent shrunk to what runs on two CPU cores: a world of fictional
companies, their founders and the founders' birthplaces and universities, written as short
encyclopedia paragraphs. Every question needs two hops, as MuSiQue's do:

    "Where was the founder of Veltrax Shipping born?"
    -> search the company: "Veltrax Shipping ... was founded by Orin Kasel ..."
    -> search the founder: "Orin Kasel ... was born in Lumora ..."  -> <answer>Lumora</answer>

The company's paragraph names a second city (its headquarters), so answering from the first
hop is wrong. Names come from fixed pools (the tiny model's tokenizer is trained on them); the
seed decides who founded what and who was born where, and which companies are held out.

Users with MuSiQue itself pass its JSON-lines file (:func:`load_musique`): its paragraphs
become the corpus and its answerable questions the tasks.

The reward is the paper's: 0.9 x word-level F1 of the answer (MuSiQue's and SQuAD's
normalisation, best over the gold answer and its aliases) + 0.1 x format (the final reply
holds exactly one ``<answer>...</answer>``). A reply without the tags earns nothing: there
is no answer to score.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from examples.data_files import DataFormatError, json_objects
from examples.rag import bm25
from tracerl.instrumentation.agent_env import cache_dir

# One line of the tasks file (the recipe's ``Task``): task_id, split, question, answers (gold first, then aliases),
# corpus. Spelled here, not imported from the loop's recipe module, because the agent's process imports this one.
Task = dict[str, Any]

INSTRUCTIONS = (
    "Answer the question from the corpus. Call search with a short query, again if the result "
    "names what to look up next, then reply <answer>the answer</answer> in a few words."
)
TOOL_NAME = "search"
TOP_K = 3  # paragraphs one search returns
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
HELD_OUT_FRACTION = 0.2

# The fictional world's name pools: fixed, so that the tokenizer knows every name.
_ORG_HEADS = ("Vel", "Or", "Quil", "Zeph", "Mar", "Kor", "Tal", "Bren")
_ORG_TAILS = ("trax", "bisco", "lon", "yra", "dex", "ama", "ith", "ova")
ORG_KINDS = ("Shipping", "Foods", "Motors", "Textiles", "Robotics", "Press", "Mining", "Pharma")
FIRST_NAMES = ("Orin", "Mira", "Tobin", "Elsa", "Ravi", "Ilse", "Joren", "Kaya", "Lucan", "Nadia", "Pell", "Sana", "Teo", "Vera", "Wim", "Yara")
LAST_NAMES = ("Kasel", "Dunmore", "Fairly", "Holt", "Ivers", "Lark", "Morrow", "Nyberg", "Osei", "Pratt", "Quade", "Rook", "Sallow", "Thorne", "Umber", "Voss")
CITIES = ("Lumora", "Brisca", "Caldor", "Denmere", "Elsworth", "Falkreach", "Graymoor", "Harrowgate", "Istvar", "Jorvale", "Kestria", "Lindholm", "Mossbank", "Norwick", "Ostrava", "Pellham")
RIVERS = ("Asha", "Brun", "Corra", "Dalla")
UNIVERSITIES = tuple(f"{stem} University" for stem in ("Aldwick", "Brenmoor", "Castell", "Dovecote", "Eastmarch", "Fenwright", "Glenhollow", "Halberd"))
PROFESSIONS = ("engineer", "chemist", "designer", "economist")
QUESTIONS = {  # what a question asks of the company's founder -> its wording
    "birthplace": "Where was the founder of {org} born?",
    "university": "Which university did the founder of {org} attend?",
}



@dataclass(frozen=True)
class Document:
    title: str
    text: str


# ---- the generated world ------------------------------------------------------------


def org_names() -> list[str]:
    """Every head+tail stem once, each with a kind (of industry) that varies along both."""
    return [f"{head}{tail} {ORG_KINDS[(i + j) % len(ORG_KINDS)]}" for i, head in enumerate(_ORG_HEADS) for j, tail in enumerate(_ORG_TAILS)]


def person_names() -> list[str]:
    return [f"{first} {last}" for first in FIRST_NAMES for last in LAST_NAMES]


def generated_world(seed: int) -> tuple[list[Document], list[Task]]:
    """The corpus and the questions of the world made from ``seed`` (tasks without split or corpus yet)."""
    rng = random.Random(seed)
    orgs = org_names()
    founders = rng.sample(person_names(), len(orgs))
    documents, tasks = [], []
    for org, founder in zip(orgs, founders):
        birthplace, headquarters = rng.sample(CITIES, 2)
        university = rng.choice(UNIVERSITIES)
        kind = org.split()[-1].lower()
        documents.append(Document(org, f"{org} is a {kind} company founded in {rng.randint(1950, 2015)} by {founder}. Its headquarters are in {headquarters}."))
        documents.append(Document(founder, f"{founder} is a {rng.choice(PROFESSIONS)} born in {birthplace}. {founder} studied at {university}."))
        for asks, answer in (("birthplace", birthplace), ("university", university)):
            slug = org.lower().replace(" ", "-")
            tasks.append({"task_id": f"{asks}-{slug}", "question": QUESTIONS[asks].format(org=org), "answers": [answer], "group": org})
    for i, city in enumerate(CITIES):
        documents.append(Document(city, f"{city} is a city on the {RIVERS[i % len(RIVERS)]} river."))
    return documents, tasks


# ---- MuSiQue's format ----------------------------------------------------------------

_MUSIQUE_FIELDS = {"id": str, "paragraphs": list, "question": str, "answer": str}
_PARAGRAPH_FIELDS = {"title": str, "paragraph_text": str}


def load_musique(path: Path) -> tuple[list[Document], list[Task]]:
    """MuSiQue's JSON lines: every question's paragraphs (deduplicated) make the corpus; answerable questions the tasks.

    Each line holds ``id``, ``question``, ``answer``, ``answer_aliases`` (optional),
    ``answerable`` (optional, MuSiQue-Full's unanswerable questions are skipped: they have no
    answer to score) and ``paragraphs``, a list of ``{idx, title, paragraph_text, is_supporting}``.
    """
    documents: dict[Document, None] = {}
    tasks = []
    seen_ids: set[str] = set()
    for where, record in json_objects(path, "MuSiQue", ", ".join(_MUSIQUE_FIELDS)):
        _check_fields(record, _MUSIQUE_FIELDS, where)
        aliases = record.get("answer_aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise DataFormatError(f"{where}: 'answer_aliases' must be a list of strings, got {aliases!r}")
        for k, paragraph in enumerate(record["paragraphs"]):
            if not isinstance(paragraph, dict):
                raise DataFormatError(f"{where}: paragraphs[{k}] is a {type(paragraph).__name__}, expected an object with title and paragraph_text")
            _check_fields(paragraph, _PARAGRAPH_FIELDS, f"{where}, paragraphs[{k}]")
            documents[Document(paragraph["title"], paragraph["paragraph_text"])] = None
        if record["id"] in seen_ids:
            raise DataFormatError(f"{where}: id {record['id']!r} appears twice; task ids must be unique")
        seen_ids.add(record["id"])
        if record.get("answerable", True) and record["answer"].strip():
            tasks.append({"task_id": record["id"], "question": record["question"], "answers": [record["answer"], *aliases], "group": record["id"]})
    if not tasks:
        raise DataFormatError(f"{path}: no answerable question; is it a MuSiQue file (one JSON object per line)?")
    return list(documents), tasks


def _check_fields(record: dict, fields: dict[str, type], where: str) -> None:
    for name, kind in fields.items():
        if name not in record:
            raise DataFormatError(f"{where}: missing field {name!r} (MuSiQue lines hold {', '.join(fields)})")
        if not isinstance(record[name], kind):
            raise DataFormatError(f"{where}: field {name!r} is a {type(record[name]).__name__}, expected a {kind.__name__}")


# ---- tasks and their corpus -----------------------------------------------------------


def all_tasks(seed: int, data: Path | None = None) -> tuple[list[Task], list[Task]]:
    """Training and held-out tasks (disjoint: a held-out company, or MuSiQue question, is never trained on).

    Each task names its corpus, a BM25 index on disk (:func:`corpus_index`).
    """
    documents, tasks = load_musique(data) if data is not None else generated_world(seed)
    corpus = str(corpus_index(documents))
    groups = sorted({t["group"] for t in tasks})
    if len(groups) < 2:
        raise DataFormatError(f"{data}: one answerable question; at least two are needed, one to train on and one held out")
    random.Random(seed).shuffle(groups)
    held_out_groups = set(groups[: max(1, int(len(groups) * HELD_OUT_FRACTION))])
    train, held_out = [], []
    for task in tasks:
        test = task["group"] in held_out_groups
        line = {"task_id": task["task_id"], "split": "test" if test else "train", "question": task["question"],
                "answers": task["answers"], "corpus": corpus}
        (held_out if test else train).append(line)
    return train, held_out


def corpus_index(documents: Sequence[Document]) -> Path:
    """The BM25 index of ``documents`` as a DuckDB file, built once per corpus (cached by content)."""
    digest = hashlib.sha256(json.dumps([[d.title, d.text] for d in documents]).encode()).hexdigest()[:16]
    path = cache_dir() / "rag" / f"corpus-{digest}.duckdb"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.tmp-{os.getpid()}.duckdb")
    with duckdb.connect(str(tmp)) as con:
        bm25.build_index(con, [(d.title, d.text) for d in documents])
    try:
        os.replace(tmp, path)
    except OSError:  # another process built the same corpus first
        tmp.unlink(missing_ok=True)
    return path


def open_corpus(path: str | Path) -> duckdb.DuckDBPyConnection:
    if not Path(path).exists():
        raise FileNotFoundError(f"corpus index {path} does not exist; tasks name the index their recipe built")
    return duckdb.connect(str(path), read_only=True)


# ---- what the agent sees ---------------------------------------------------------------


def search_output(con: duckdb.DuckDBPyConnection, query: str) -> str:
    """What the search tool returns: the best ``TOP_K`` paragraphs as ``title: text`` lines."""
    hits = bm25.search(con.cursor(), query, TOP_K)
    return "\n".join(f"{hit.title}: {hit.text}" for hit in hits) or "no result"


def first_messages(question: str) -> list[dict]:
    """The agent's first request, as the Agents SDK sends it."""
    return [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": question}]


def after_searches(question: str, searches: Sequence[tuple[str, str]]) -> list[dict]:
    """The request after ``searches`` (query, tool output), each call then its output, as the SDK sends them."""
    messages = first_messages(question)
    for i, (query, output) in enumerate(searches):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": TOOL_NAME, "arguments": json.dumps({"query": query})}}
        messages += [{"role": "assistant", "tool_calls": [call]}, {"role": "tool", "tool_call_id": f"call_{i}", "content": output}]
    return messages


def answer_text(answer: str) -> str:
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


# ---- the reward --------------------------------------------------------------------------

_ANSWER = re.compile(re.escape(ANSWER_OPEN) + r"(.*?)" + re.escape(ANSWER_CLOSE), re.DOTALL)


def extracted_answer(reply: str) -> str | None:
    """The text of the reply's one ``<answer>`` block; None without one, with several, or an empty one."""
    found = _ANSWER.findall(reply)
    if len(found) != 1 or not found[0].strip():
        return None
    return found[0].strip()


def normalize_answer(text: str) -> str:
    """MuSiQue's (and SQuAD's) normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def reward(reply: str, answers: Sequence[str]) -> float:
    """0.9 x the best answer F1 over ``answers`` + 0.1 x format; 0 without a well-formed answer."""
    answer = extracted_answer(reply)
    if answer is None:
        return 0.0
    return 0.9 * max(token_f1(answer, gold) for gold in answers) + 0.1
