"""Buckets: parts of one build that need nothing from each other, for building on many machines.

What decides a bucket is what a build compares or joins across traces. Credit compares the
episodes of a task group (GRPO, RLOO); the judge compares the episodes of a task; an episode
may span traces (agentlightning's rollout attempts), and two copies of one call (the client's
span and a gateway's) are merged by response id. So traces are linked when their spans share
an episode id, a task id, a rollout id or a response id; linked traces form a component, and a
component goes whole into one bucket. Inside a bucket every stage sees all it compares, and
nothing crosses: the one thing every bucket shares is the data's clock (pending or stale
episodes are decided on the whole input's latest span end, not on a bucket's).

The inputs beside the spans follow their keys: a late reward goes with the episode, trace,
response or rollout it names, a log record with its trace, a judgment with its episode; one that
names nothing any span has goes to bucket 0, where it is counted once (as unmatched, or without
its span), as the one-machine build counts it.

How a build is planned (``plan``): a first pass over the span files, a chunk of files at a time
(``keys_of_spans``, the ``normalize`` stage's own reading of ids, on any worker), gives each
trace's span count, first file and ids; keys seen in one trace link nothing and are dropped; the
links left (a task group's traces, mostly) are joined into components, and the components, in the
order of the files they start in, are cut into runs of about equal span counts, one per bucket:
writers write traces in time order, so a bucket's traces share files and a bucket reads few of them. The plan is a table of every key and
its bucket, which each bucket's build reads (:class:`Bucket`).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

# Credit puts the episodes without a task id in one group (with those whose task id is ''): their traces are
# linked by the key '' once no chunk saw a task id for their episode. The chunks mark each episode they saw:
TASK_SEEN, TASK_UNSEEN = "\x1ftask-seen:", "\x1ftask-unseen:"
PLAN_SCHEMA = pa.schema([("key", pa.string()), ("bucket", pa.int32())])
KEYS_SCHEMA = pa.schema([("trace_id", pa.string()), ("key", pa.string()), ("spans", pa.int64()), ("end_ns", pa.int64()),
                         ("first_file", pa.int64())])
FILES_SCHEMA = pa.schema([("trace_id", pa.string()), ("filename", pa.string())])


def keys_of_spans(con: duckdb.DuckDBPyConnection, file_offset: int = 0) -> pa.Table:
    """Per trace of ``span_meta``: each id its spans name (episode, task, rollout, response), with the
    trace's span count, latest end and first file (``file_offset`` + its index among the files read:
    its place in the whole listing) on every row (the trace id itself is one of its keys)."""
    return con.sql(
        f"""
        WITH traces AS (
            SELECT trace_id, count(*) AS spans, max(end_ns) AS end_ns, {int(file_offset)} + min(file_index) AS first_file
            FROM span_meta GROUP BY trace_id
        ),
        keys AS (
            SELECT DISTINCT trace_id, unnest([trace_id, episode_id, task_id, rollout_id, response_id]) AS key FROM span_meta
            UNION
            SELECT trace_id, CASE WHEN bool_or(task_id IS NOT NULL) THEN '{TASK_SEEN}' ELSE '{TASK_UNSEEN}' END || episode_id
            FROM span_meta GROUP BY trace_id, episode_id
        )
        SELECT trace_id, key, spans, end_ns, first_file FROM keys JOIN traces USING (trace_id) WHERE key IS NOT NULL
        """
    ).to_arrow_table().cast(KEYS_SCHEMA)


def files_of_traces(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Each trace of ``span_meta`` with each span file it lies in (what a bucket will have to read)."""
    return con.sql(
        "SELECT DISTINCT m.trace_id, f.filename FROM span_meta m JOIN span_files f USING (file_index)"
    ).to_arrow_table().cast(FILES_SCHEMA)


class _Components:
    """Union-find over trace ids: which traces a shared key links."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)  # the smallest id leads: the same plan whatever the order


@dataclass(frozen=True)
class Plan:
    """Every key of the input and its bucket; per bucket, its span count and the span files it reads; the input's clock."""

    keys: pa.Table  # PLAN_SCHEMA
    spans: list[int]
    files: list[list[str]]
    clock_ns: int | None


def plan(parts: list[pa.Table], buckets: int, where: list[pa.Table] | None = None) -> Plan:
    """Deal the components of the keys found (``keys_of_spans`` of every chunk of files) out to ``buckets`` buckets;
    ``where`` (``files_of_traces`` of the chunks) gives each bucket the files that hold its traces."""
    con = duckdb.connect()
    keys = pa.concat_tables([p.cast(KEYS_SCHEMA) for p in parts]) if parts else KEYS_SCHEMA.empty_table()
    con.register("found", keys)
    con.register("located", pa.concat_tables([w.cast(FILES_SCHEMA) for w in where]) if where else FILES_SCHEMA.empty_table())
    # a trace's spans may lie in several chunks (of disjoint files, so each chunk's row differs in first_file):
    # its span count is the sum, its end the latest
    con.execute("CREATE TABLE traces AS SELECT trace_id, sum(spans) AS spans, max(end_ns) AS end_ns, min(first_file) AS first_file "
                "FROM (SELECT DISTINCT trace_id, spans, end_ns, first_file FROM found) GROUP BY trace_id")
    con.execute(f"""
        CREATE TABLE pairs AS
        SELECT DISTINCT trace_id, key FROM found WHERE NOT starts_with(key, '\x1f')
        UNION
        SELECT DISTINCT trace_id, '' FROM found WHERE starts_with(key, '{TASK_UNSEEN}')
            AND substr(key, {len(TASK_UNSEEN) + 1}) NOT IN
                (SELECT substr(key, {len(TASK_SEEN) + 1}) FROM found WHERE starts_with(key, '{TASK_SEEN}'))
    """)
    links = con.execute("""
        SELECT key, list(trace_id ORDER BY trace_id) FROM pairs
        WHERE key IN (SELECT key FROM pairs GROUP BY key HAVING count(*) > 1) GROUP BY key ORDER BY key
    """).fetchall()
    components = _Components()
    for _, traces in links:
        for other in traces[1:]:
            components.union(traces[0], other)
    rows = con.execute("SELECT trace_id, spans, first_file FROM traces ORDER BY trace_id").fetchall()
    size: dict[str, int] = {}
    first: dict[str, int] = {}
    for trace, spans, first_file in rows:
        root = components.find(trace)
        size[root] = size.get(root, 0) + spans
        first[root] = min(first.get(root, first_file), first_file)
    # components in the order of the files they start in, cut into runs of about equal spans: writers
    # write traces in time order, so a bucket's traces share files, and a bucket reads few files
    total = sum(size.values()) or 1
    load = [0] * buckets
    bucket_of_root: dict[str, int] = {}
    before = 0
    for root in sorted(size, key=lambda r: (first[r], r)):
        target = min(buckets - 1, before * buckets // total)
        bucket_of_root[root] = target
        load[target] += size[root]
        before += size[root]
    trace_buckets = pa.table({"trace_id": [t for t, *_ in rows], "bucket": [bucket_of_root[components.find(t)] for t, *_ in rows]},
                             schema=pa.schema([("trace_id", pa.string()), ("bucket", pa.int32())]))
    con.register("trace_buckets", trace_buckets)
    table = con.sql("SELECT DISTINCT key, bucket FROM pairs JOIN trace_buckets USING (trace_id) ORDER BY key").to_arrow_table()
    files: list[list[str]] = [[] for _ in range(buckets)]
    for bucket, names in con.execute("SELECT bucket, list(DISTINCT filename ORDER BY filename) FROM located "
                                     "JOIN trace_buckets USING (trace_id) GROUP BY bucket").fetchall():
        files[bucket] = names
    clock = con.execute("SELECT max(end_ns) FROM traces").fetchall()[0][0]
    con.close()
    return Plan(keys=table.cast(PLAN_SCHEMA), spans=load, files=files, clock_ns=clock)


PLAN_RELATION = "bucket_plan"  # the plan, in a bucket's connection (outside tables.py's registry: unbucketed builds lack it)


@dataclass(frozen=True)
class Bucket:
    """One bucket of a planned build: which rows of each input it keeps, and the whole input's clock."""

    index: int
    keys: pa.Table  # the plan, every bucket's keys (a lookup: inputs naming no key go to bucket 0)
    clock_ns: int | None

    def register(self, con: duckdb.DuckDBPyConnection) -> None:
        con.register(PLAN_RELATION, self.keys)

    def _owner(self, *columns: str) -> str:
        """The bucket of the first of ``columns`` whose key the plan knows (bucket 0 for none) is this one.

        Written as IN tests, which DuckDB runs as hash joins (a correlated lookup ran as a nested
        loop: a minute for 10,000 late rewards against a million spans' keys).
        """
        known = f"(SELECT key FROM {PLAN_RELATION})"
        mine = f"(SELECT key FROM {PLAN_RELATION} WHERE bucket = {self.index})"
        cases = " ".join(f"WHEN {c} IN {known} THEN {c} IN {mine}" for c in columns)
        return f"(CASE {cases} ELSE {self.index} = 0 END)"

    @property
    def spans(self) -> str:
        return f"trace_id IN (SELECT key FROM {PLAN_RELATION} WHERE bucket = {self.index})"

    @property
    def log_records(self) -> str:
        return self._owner("trace_id")

    @property
    def late_rewards(self) -> str:
        return self._owner("episode_id", "trace_id", "response_id", "rollout_id")

    @property
    def judgments(self) -> str:
        return self._owner("episode_id")
