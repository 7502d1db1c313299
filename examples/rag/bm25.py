"""BM25 full-text search over a corpus held in a DuckDB database, written in SQL.

Why by hand: DuckDB's ``fts`` extension would do this (``PRAGMA create_fts_index`` and
``match_bm25``), but it cannot be had here. This project runs DuckDB 2.0, the registry's
``duckdb-extension-fts`` wheels stop at DuckDB 1.5.5 (an extension loads only into the
DuckDB it was built for), and ``INSTALL fts`` downloads from the extension repository,
which a machine without network cannot reach. So the index is three plain tables and the
score is one SQL query, the same formula as ``match_bm25``:

    score(d, q) = sum over distinct query terms t of
        log((N - df_t + 0.5) / (df_t + 0.5) + 1) * tf_td * (k1 + 1) / (tf_td + k1 * (1 - b + b * len_d / avgdl))

with k1 = 1.2 and b = 0.75 (``match_bm25``'s defaults). The ``+ 1`` inside the log keeps
every idf positive (Lucene's form), so a term in more than half the documents still counts
a little instead of pulling a document down. Differences from ``fts``: no stemming and no
stop-word list (idf already makes "the" and "of" weigh almost nothing). A document is its
title and text together.

Tables (in the database the index is built into, which the agent opens read-only):

- ``documents(doc_id, title, text, length)``: the corpus, ``length`` in tokens;
- ``postings(term, doc_id, tf)``: how often each term occurs in each document;
- ``term_idf(term, df, idf)`` and ``corpus_stats(num_docs, avgdl)``;
- the macro ``bm25_tokens(text)``: the one tokenizer, for documents and queries alike
  (lower case, accents stripped, split on anything that is not a letter or a digit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import duckdb

K1 = 1.2
B = 0.75

_SCHEMA = r"""
CREATE MACRO bm25_tokens(text) AS
    list_filter(regexp_split_to_array(lower(strip_accents(text)), '[^\p{L}\p{N}]+'), lambda token: token <> '');
CREATE TABLE documents (doc_id INTEGER PRIMARY KEY, title VARCHAR NOT NULL, text VARCHAR NOT NULL, length INTEGER);
"""

_INDEX = """
CREATE TABLE postings AS
    SELECT term, doc_id, count(*)::INTEGER AS tf
    FROM (SELECT doc_id, unnest(bm25_tokens(title || ' ' || text)) AS term FROM documents)
    GROUP BY term, doc_id;
UPDATE documents SET length = coalesce((SELECT sum(tf) FROM postings p WHERE p.doc_id = documents.doc_id), 0);
CREATE TABLE corpus_stats AS SELECT count(*) AS num_docs, avg(length) AS avgdl FROM documents;
CREATE TABLE term_idf AS
    SELECT term, count(*) AS df, ln((s.num_docs - count(*) + 0.5) / (count(*) + 0.5) + 1) AS idf
    FROM postings, corpus_stats s GROUP BY term, s.num_docs;
"""

_SEARCH = """
WITH query_terms AS (SELECT DISTINCT unnest(bm25_tokens($query)) AS term),
scores AS (
    SELECT p.doc_id,
           sum(i.idf * p.tf * ($k1 + 1) / (p.tf + $k1 * (1 - $b + $b * d.length / s.avgdl))) AS score
    FROM query_terms q
    JOIN postings p USING (term)
    JOIN term_idf i USING (term)
    JOIN documents d ON d.doc_id = p.doc_id, corpus_stats s
    GROUP BY p.doc_id
)
SELECT d.doc_id, d.title, d.text, scores.score
FROM scores JOIN documents d USING (doc_id)
ORDER BY round(scores.score, 9) DESC, d.doc_id
LIMIT $k
"""


@dataclass(frozen=True)
class Hit:
    doc_id: int
    title: str
    text: str
    score: float


def build_index(con: duckdb.DuckDBPyConnection, documents: Iterable[tuple[str, str]]) -> int:
    """Index ``(title, text)`` documents into ``con``'s database (empty of these tables); return how many.

    ``doc_id`` is the position in ``documents``, so the same corpus gives the same ids.
    """
    rows = [(i, title, text) for i, (title, text) in enumerate(documents)]
    if not rows:
        raise ValueError("the corpus is empty: BM25 needs at least one document")
    con.execute(_SCHEMA)
    con.executemany("INSERT INTO documents (doc_id, title, text) VALUES (?, ?, ?)", rows)
    con.execute(_INDEX)
    return len(rows)


def search(con: duckdb.DuckDBPyConnection, query: str, k: int, *, k1: float = K1, b: float = B) -> list[Hit]:
    """The ``k`` best documents for ``query``, best first; only documents sharing a term with it.

    Ties go to the lower ``doc_id``. Scores are compared to 9 decimals: DuckDB sums a
    document's terms in whatever order its threads meet them, so equal scores can differ in
    the last bits, and the same search must return the same list every time.
    """
    rows = con.execute(_SEARCH, {"query": query, "k": k, "k1": k1, "b": b}).fetchall()
    return [Hit(int(doc_id), title, text, float(score)) for doc_id, title, text, score in rows]


def tokens(con: duckdb.DuckDBPyConnection, text: str) -> list[str]:
    """``text`` as the index tokenizes it."""
    return con.execute("SELECT bm25_tokens(?)", [text]).fetchall()[0][0]
