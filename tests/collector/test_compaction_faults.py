"""Compaction searched for bugs, not only replayed: random files, names, schemas, hours, kill points,
with writers and readers at work during the passes.

Hypothesis draws a folder's history: files written by writers with any name a collector or exporter
may take (and some it may not), of any size, in closed hours and the open one, with an extra column
(a newer writer), a column of another type, copies under hidden names, Parquet files of another
table, files whose data pages are corrupt; and passes killed (``os._exit`` at an exact step, as
``kill -9`` leaves a process: ``tracerl_testing.faults``) while more files land and a reader lists
and reads. The invariant is the pipeline's view (``Location.files``): every acknowledged span exactly
once, after every kill, during every pass, and after the passes that finish the work; nothing that
is not compaction's is ever deleted or changed.

``TRACERL_FUZZ_EXAMPLES`` (default 40, under a minute here) draws more.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from posixpath import basename

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tracerl.collector.compaction import CompactionSettings, compact
from tracerl.collector.service import CollectorConfig
from tracerl.core.compaction_log import check_writer_prefix
from tracerl.core.storage import write_parquet_atomic
from tracerl.pipeline.location import locate
from tracerl_testing.faults import compact_killed_at, start_compaction
from tracerl_testing.synthetic_spans import generate

NOW = time.time()
HOURS = ("date=2026-11-26/hour=01", "date=2026-11-26/hour=02", time.strftime("date=%Y-%m-%d/hour=%H", time.gmtime(NOW)))
EXAMPLES = int(os.environ.get("TRACERL_FUZZ_EXAMPLES", "40"))

prefixes = st.one_of(
    st.sampled_from(["spans", "compact-east", "compact", "compactor", "c1_w1", "x.y", "_meta", ".dot", "compact-0123456789abcdef"]),
    st.from_regex(r"[A-Za-z0-9_.-]{1,14}", fullmatch=True),
)
kinds = st.sampled_from(["span"] * 5 + ["wider", "odd", "hidden", "foreign", "corrupt"])
files = st.tuples(st.integers(0, len(HOURS) - 1), prefixes, st.integers(1, 3), kinds)
rounds = st.lists(st.tuples(st.lists(files, max_size=8), st.one_of(st.none(), st.integers(1, 12), st.integers(13, 40)),
                            st.sampled_from([0, 30, 700, 4000])), min_size=1, max_size=4)


@dataclass
class Folder:
    """A data dir and what its writers were told was stored (acknowledged span ids), and what is not data."""

    data: Path
    acknowledged: Counter = field(default_factory=Counter)
    unreadable: set[str] = field(default_factory=set)  # spans files a reader cannot read (named, never merged)
    untouchable: dict[Path, bytes] = field(default_factory=dict)  # not compaction's: must stay byte for byte
    conflicting: set[str] = field(default_factory=set)  # partitions holding a file with a column of another type
    episodes: int = 0

    @property
    def spans(self) -> str:
        return str(self.data / "spans")

    def write(self, hour: int, prefix: str, episodes: int, kind: str) -> None:
        table = generate(episodes, first=self.episodes, seed=self.episodes)
        self.episodes += episodes
        folder = self.data / "spans" / HOURS[hour]
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{self.episodes:05d}.parquet"
        if kind == "hidden":  # a backup copy: never data
            pq.write_table(table, folder / f".backup-{name}")
            self.untouchable[folder / f".backup-{name}"] = (folder / f".backup-{name}").read_bytes()
        elif kind == "foreign":  # another table's file: its schema lacks the spans' required columns
            pq.write_table(pa.table({"answer": list(range(episodes))}), folder / f"notes-{name}")
            self.unreadable.add(f"notes-{name}")
            self.untouchable[folder / f"notes-{name}"] = (folder / f"notes-{name}").read_bytes()
        elif kind == "corrupt":  # the footer reads, the pages do not
            path = folder / f"corrupt-{name}"
            pq.write_table(table, path)
            raw = bytearray(path.read_bytes())
            footer = int.from_bytes(raw[-8:-4], "little") + 8
            raw[4:len(raw) - footer] = b"\xa5" * (len(raw) - footer - 4)
            path.write_bytes(bytes(raw))
            self.unreadable.add(path.name)
            self.untouchable[path] = path.read_bytes()
        else:
            try:
                check_writer_prefix(prefix)
            except ValueError:
                with pytest.raises(ValueError, match="is not allowed"):  # a collector refuses it at start
                    CollectorConfig(out=str(self.data), instance_id=prefix)
                event("refused writer prefix")
                return
            if kind == "wider":
                table = table.append_column("extra_column", pa.array(["x"] * table.num_rows))
            elif kind == "odd":
                table = table.set_column(table.schema.get_field_index("name"), "name",
                                         pa.array(range(table.num_rows), pa.int64()))
                self.conflicting.add(HOURS[hour])
            write_parquet_atomic(table, self.spans, prefix=prefix, partition=HOURS[hour])
            self.acknowledged.update(table.column("span_id").to_pylist())

    def seen(self) -> Counter:
        """Span ids as the pipeline's listing reads them (files it cannot read are named, not data)."""
        while True:
            spans = locate(str(self.data)).child("spans")
            ids: Counter = Counter()
            try:
                for name in spans.files():
                    if basename(name) not in self.unreadable:
                        ids.update(spans.read_table(name, ["span_id"]).column("span_id").to_pylist())
                return ids
            except FileNotFoundError:  # listed before a pass deleted inputs whose grace (simulated time) was over
                event("reader re-listed")


def _settings(target: int) -> dict:
    return {"target_bytes": target, "settle_s": 900, "grace_s": 600}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
@given(history=rounds, target=st.sampled_from([1 << 20, 24 << 10]))
@example(history=[([(0, "compact-east", 2, "span"), (2, "compact-east", 1, "span")], None, 0)], target=1 << 20)  # issue 52: deleted as orphans
@example(history=[([(0, "spans", 2, "span"), (0, "spans", 1, "hidden")], None, 0)], target=1 << 20)  # issue 52: merged, duplicated
@example(history=[([(0, "spans", 1, "span"), (0, "spans", 1, "foreign"), (1, "spans", 1, "span"), (1, "spans", 1, "span")],
                   None, 0)], target=1 << 20)  # issue 52: stopped every later partition
def test_every_acknowledged_span_is_read_exactly_once_whatever_happens(tmp_path_factory, history, target):
    folder = Folder(tmp_path_factory.mktemp("fault") / "data")
    now = NOW
    for new_files, kill_at, advance in history:
        now += advance
        (folder.data / "spans").mkdir(parents=True, exist_ok=True)
        before, during = new_files[:len(new_files) // 2 + 1], new_files[len(new_files) // 2 + 1:]
        for spec in before:
            folder.write(*spec)
        child = start_compaction(str(folder.data), _settings(target), now, kill_at)
        for spec in during:  # writers at work during the pass
            folder.write(*spec)
        while child.is_alive():  # and a reader
            assert folder.seen() == folder.acknowledged
        child.join()
        assert child.exitcode in (0, 137)
        event(f"pass {'killed' if child.exitcode else 'ran to the end'}")
        assert folder.seen() == folder.acknowledged, f"after a pass killed at step {kill_at}"

    # every hour closed: one pass merges, the next (grace over) deletes the inputs, a third finds nothing to do
    for later in (10**6, 2 * 10**6, 3 * 10**6):
        results = compact(str(folder.data), CompactionSettings(**_settings(target)), now=NOW + later)
        assert folder.seen() == folder.acknowledged
        assert not [r.failed for r in results if r.failed]
    assert not [r.describe() for r in results if r.merged or r.cleaned or r.deleted]
    # named: files no reader can read, or a partition's files whose column types conflict (which one
    # gives way is the partition's choice); a lone file is never read, so may go unnamed
    named = {(r.partition, reason.split(":")[0]) for r in results for reason in r.left_alone}
    assert all(name in folder.unreadable or partition in folder.conflicting for partition, name in named)
    for path, content in folder.untouchable.items():
        assert path.read_bytes() == content, f"{path.name} is not compaction's, yet it changed"
    leftovers = [p.name for p in folder.data.rglob("*") if p.name.endswith((".tmp", ".pending"))]
    assert not leftovers


def test_a_pass_killed_at_each_of_its_steps_loses_and_duplicates_nothing(tmp_path):
    """Not drawn: every step of a pass over two closed hours, one after another, then the pass that finishes."""
    steps = 0
    while True:
        steps += 1
        folder = Folder(tmp_path / f"killed-{steps}")
        for hour in (0, 0, 0, 1, 1):
            folder.write(hour, "spans", 1, "span")
        killed = compact_killed_at(str(folder.data), {**_settings(1 << 20), "grace_s": 0}, NOW, steps)
        assert folder.seen() == folder.acknowledged, f"killed at step {steps}"
        compact(str(folder.data), CompactionSettings(**{**_settings(1 << 20), "grace_s": 0}), now=NOW + 60)
        assert folder.seen() == folder.acknowledged, f"the pass after a kill at step {steps}"
        assert len(list((folder.data / "spans").rglob("*.parquet"))) == 2
        if not killed:
            break
    assert steps > 10  # the kills did land at each step of both partitions' passes
