"""Automatic intermediate rewards (AIR): declarative rules that turn system signals into rewards.

A rule is a SQL predicate over the ``spans`` view (every span column, ``attributes``
JSON, plus ``episode_id``, ``is_llm``, ``is_tool``; the macro ``attr(attributes, 'key')``
reads one attribute), a value, and which LLM call receives it:

- ``requesting_call``: the last policy call that ended before the matching span
  started (the call that asked for the tool);
- ``self``: the matching span is itself the LLM call;
- ``episode_end``: the last call of the episode.

Rules come from a JSON or TOML file (a list under ``rules``) and the defaults below,
which can be switched off.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from tracerl.pipeline.source import PipelineInputError
from tracerl.pipeline.sql_text import sql_str
from tracerl.schemas import attributes as A

TARGETS = ("requesting_call", "self", "episode_end")


@dataclass(frozen=True)
class Rule:
    name: str
    where: str
    value: float
    target: str = "requesting_call"

    @property
    def reward_name(self) -> str:
        """The name of the rewards this rule gives (in ``rewards``, the manifest's counts, the report)."""
        return "air." + self.name

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise PipelineInputError(f"AIR rule {self.name!r}: target must be one of {', '.join(TARGETS)}, got {self.target!r}")


_TOOL_OUTPUT = (
    f"lower(coalesce(attr(attributes, '{A.GEN_AI_TOOL_CALL_RESULT}'), attr(attributes, '{A.OPENINFERENCE_OUTPUT_VALUE}'), "
    f"attr(attributes, '{A.TRACELOOP_ENTITY_OUTPUT}'), ''))"
)

# The cheap LIKE tests come first: DuckDB then parses the attribute JSON only of the
# few spans that can match, which keeps the defaults cheap on a million spans.
DEFAULT_RULES = (
    # a tool span that ends in error penalises the call that requested the tool
    Rule("tool_error", "is_tool AND status_code = 'ERROR'", -0.1, "requesting_call"),
    # a SQL tool (or database client span) that returns an error instead of raising
    Rule(
        "sql_error",
        "coalesce(status_code, '') <> 'ERROR' AND ("
        f"(is_tool AND lower(coalesce(attr(attributes, '{A.GEN_AI_TOOL_NAME}'), name)) LIKE '%sql%' "
        f"AND regexp_matches({_TOOL_OUTPUT}, '(^|[^a-z])(error|exception)')) "
        f"OR (attributes LIKE '%\"{A.DB_SYSTEM}%' AND attributes LIKE '%\"{A.ERROR_TYPE}\"%' "
        f"AND coalesce(attr(attributes, '{A.DB_SYSTEM}'), attr(attributes, '{A.DB_SYSTEM_NAME}')) IS NOT NULL))",
        -0.1,
        "requesting_call",
    ),
    # an LLM output whose tool-call arguments are not the JSON they claim to be
    Rule(
        "invalid_tool_call",
        "is_llm AND attributes LIKE '%tool_call%' "
        "AND list_bool_or(list_transform(tool_call_arguments(attributes), lambda x: NOT coalesce(json_valid(x), false)))",
        -0.1,
        "self",
    ),
    # any span that timed out (tool, sub-agent, or an LLM call of the environment)
    Rule(
        "timeout",
        "regexp_matches(lower(coalesce(status_message, '')), 'timed? ?out') "
        f"OR (attributes LIKE '%imeout%' AND regexp_matches(lower(coalesce(attr(attributes, '{A.ERROR_TYPE}'), '')), 'timeout')) "
        "OR coalesce(events, '') LIKE '%TimeoutError%'",
        -0.1,
        "requesting_call",
    ),
)


def load_rules(path: str | Path | None, *, defaults: bool = True) -> list[Rule]:
    """Default rules (unless switched off) followed by the rules of ``path``; a later rule
    with the same name replaces an earlier one, so a file can re-weight a default."""
    rules = {r.name: r for r in DEFAULT_RULES} if defaults else {}
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise PipelineInputError(f"AIR rules file {file} does not exist")
        try:
            text = file.read_text()
            data = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise PipelineInputError(f"AIR rules file {file} cannot be parsed: {exc}") from exc
        entries = data.get("rules", []) if isinstance(data, dict) else data
        for i, entry in enumerate(entries):
            try:
                rule = Rule(
                    name=str(entry["name"]), where=str(entry["where"]),
                    value=float(entry["value"]), target=str(entry.get("target", "requesting_call")),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise PipelineInputError(
                    f"AIR rules file {file}, rule #{i + 1}: needs name, where, value (and optional target): {exc}"
                ) from exc
            rules[rule.name] = rule
    return list(rules.values())


def rules_as_dicts(rules: list[Rule]) -> list[dict]:
    return [asdict(r) for r in rules]


def air_rewards_sql(con: duckdb.DuckDBPyConnection, rules: list[Rule]) -> str | None:
    """A SELECT of reward rows (episode_id, time_ns, name, value, source, ...) the rules produce.

    All predicates are evaluated in one pass over the spans into table ``air_hits``
    (one boolean per rule), so more rules do not mean more scans. Each predicate is
    first checked alone, so a typo fails with the rule's name.
    """
    for rule in rules:
        try:
            con.execute(f"SELECT count(*) FROM (SELECT * FROM spans LIMIT 0) WHERE {rule.where}")
        except duckdb.Error as exc:
            raise PipelineInputError(f"AIR rule {rule.name!r}: its predicate is not valid SQL over `spans`: {exc}") from exc
    flags = ", ".join(f"coalesce(({rule.where}), false)" for rule in rules)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE air_hits AS
        SELECT episode_id, trace_id, span_id, start_time_unix_nano, end_time_unix_nano, [{flags}]::BOOLEAN[] AS hits
        FROM spans WHERE {" OR ".join(f"({rule.where})" for rule in rules) or "false"}
        """
    )
    if not rules:
        return None
    parts = []
    for i, rule in enumerate(rules, start=1):
        time = {"requesting_call": "start_time_unix_nano", "self": "end_time_unix_nano", "episode_end": "NULL"}[rule.target]
        name = sql_str(rule.reward_name)
        parts.append(
            f"SELECT episode_id, {time}::BIGINT AS time_ns, {name} AS name, {float(rule.value)!r}::DOUBLE AS value, "
            f"'air' AS source, trace_id AS origin_trace_id, span_id AS origin_span_id, NULL::VARCHAR AS response_id "
            f"FROM air_hits WHERE hits[{i}]"
        )
    return " UNION ALL ".join(parts)
