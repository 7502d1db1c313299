"""BM25 in SQL over DuckDB scores as DuckDB's fts extension does, checked against an independent implementation."""

from __future__ import annotations

import importlib.util
import math

import duckdb
import pytest

from examples.rag import bm25
from examples.rag.task import generated_world
from tracerl_testing.installed import require

THREE_DOCS = [
    ("Veltrax", "Veltrax is a company founded by Orin Kasel."),
    ("Orin Kasel", "Orin Kasel was born in Lumora."),
    ("Lumora", "Lumora is a city on the Asha river."),
]


def indexed(documents) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    bm25.build_index(con, documents)
    return con


def test_scores_by_hand_on_three_documents():
    con = indexed(THREE_DOCS)
    # lengths (title and text): 9, 8, 9 tokens; avgdl 26/3. "was", "born": df 1; "orin", "kasel": df 2.
    idf1, idf2 = math.log((3 - 1 + 0.5) / 1.5 + 1), math.log((3 - 2 + 0.5) / 2.5 + 1)

    def term(tf: int, length: int) -> float:
        return tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / (26 / 3)))

    hits = bm25.search(con, "Where was Orin Kasel born? Orin!", k=5)  # "where" is in no document; repeats count once
    assert [h.title for h in hits] == ["Orin Kasel", "Veltrax"]  # Lumora shares no term: not returned
    assert hits[0].score == pytest.approx(2 * idf1 * term(1, 8) + 2 * idf2 * term(2, 8))
    assert hits[1].score == pytest.approx(2 * idf2 * term(1, 9))
    assert bm25.search(con, "Kasel", k=1)[0].title == "Orin Kasel"  # k limits; tf 2 in a shorter document wins
    assert bm25.search(con, "nothing here", k=3) == []


def test_tokens_are_lower_case_letters_and_digits_without_accents():
    con = indexed(THREE_DOCS)
    assert bm25.tokens(con, "São-Paulo's 1987 Café, (Lumora)!") == ["sao", "paulo", "s", "1987", "cafe", "lumora"]
    assert bm25.search(con, "LUMORÁ", k=1)[0].title == "Lumora"  # queries go through the same tokenizer


def test_same_scores_as_rank_bm25_with_the_fts_idf():
    """rank_bm25 computes the term-frequency part independently; only its idf is swapped for
    match_bm25's (its BM25Okapi floors negative idfs at a fraction of the mean instead)."""
    require(importlib.util.find_spec("rank_bm25") is not None, "rank_bm25", "pip install rank_bm25 (the [dev] extra)")
    from rank_bm25 import BM25Okapi

    class FtsIdf(BM25Okapi):
        def _calc_idf(self, nd):
            self.idf = {word: math.log((self.corpus_size - df + 0.5) / (df + 0.5) + 1) for word, df in nd.items()}

    documents, tasks = generated_world(seed=3)
    con = indexed([(d.title, d.text) for d in documents])
    reference = FtsIdf([bm25.tokens(con, f"{d.title} {d.text}") for d in documents], k1=bm25.K1, b=bm25.B)
    for query in [t["question"] for t in tasks[:20]] + ["Lumora", "Teo Lark", "shipping company headquarters"]:
        expected = reference.get_scores(list(dict.fromkeys(bm25.tokens(con, query))))
        hits = bm25.search(con, query, k=len(documents))
        assert {h.doc_id: h.score for h in hits} == pytest.approx({i: s for i, s in enumerate(expected) if s > 0})
        ranked = sorted((i for i, s in enumerate(expected) if s > 0), key=lambda i: (-round(expected[i], 9), i))  # ties by doc_id
        assert [h.doc_id for h in hits] == ranked


def test_an_empty_corpus_is_refused():
    with pytest.raises(ValueError, match="the corpus is empty"):
        bm25.build_index(duckdb.connect(), [])
