"""`tracerl pipeline` commands (also the `pipeline` console script) and `tracerl sql`."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from tracerl.core.commands import command_group
from tracerl.pipeline.dataset_folder import MANIFEST
from tracerl.pipeline.options import ADVANTAGES, CREDITS, EXPORTS, BuildOptions
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E

app = command_group(no_args_is_help=True, help="Spans -> episodes -> training transitions.")


@app.callback()
def _group() -> None:
    """Spans -> episodes -> training transitions."""  # a callback keeps `pipeline CMD` a group


console = Console(stderr=True, soft_wrap=True)  # paths in messages stay copy-pasteable
DEFAULTS = BuildOptions()  # every default below comes from the dataclass

# str, not Path: Path("s3://b/p") would become "s3:/b/p"
SpansOpt = Annotated[str, typer.Option(
    "--spans", help="Data dir (holding spans/) or a folder of span Parquet files: local, or a URI such as s3://bucket/prefix.")]
AgentsOpt = Annotated[Optional[str], typer.Option("--agents", help="Regex: only calls of matching agents are policy calls.")]
PolicyOpt = Annotated[Optional[list[str]], typer.Option(
    "--policy", help="NAME=AGENT[,AGENT...]: these agents' calls are policy NAME's, trained on only where model NAME served them (repeatable; instead of --agents).")]
SplitOpt = Annotated[Optional[list[str]], typer.Option("--split", help="Keep episodes of this split (repeatable).")]
VersionsOpt = Annotated[Optional[str], typer.Option("--policy-versions", help="e.g. '3', '3,4' or '>=3'.")]
RewardsOpt = Annotated[
    Optional[list[str]], typer.Option("--rewards", help="Late rewards (Parquet/CSV/JSONL, local or a URI) keyed by episode_id, trace_id, response_id or rollout_id (agentlightning).")
]
WeightOpt = Annotated[
    Optional[list[str]], typer.Option("--reward-weight", help="NAME=WEIGHT, e.g. correctness=0.9 (repeatable).")
]
EvaluationRewardsOpt = Annotated[bool, typer.Option(
    "--evaluation-rewards/--no-evaluation-rewards",
    help="Read OpenTelemetry gen_ai.evaluation.result events (log records or span events) with a score value as rewards named by their gen_ai.evaluation.name.")]
EvaluationOpt = Annotated[Optional[list[str]], typer.Option(
    "--evaluation", help="Only evaluation events of this gen_ai.evaluation.name become rewards (repeatable; default: every name).")]
RulesOpt = Annotated[Optional[Path], typer.Option("--rules", help="JSON/TOML file of intermediate-reward rules.")]
DefaultRulesOpt = Annotated[bool, typer.Option("--default-rules/--no-default-rules", help="Built-in intermediate-reward rules.")]
TimeoutOpt = Annotated[float, typer.Option("--episode-timeout", help="Seconds of inactivity before an unfinished episode is processed as truncated.")]
AdvantageOpt = Annotated[str, typer.Option(
    "--advantage",
    help=f"{', '.join(ADVANTAGES)}: grpo and rloo compare episodes of one task (a task of one episode gets 0), batch all episodes of the build.",
)]


def _weights(items: list[str] | None) -> dict[str, float]:
    weights = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            weights[name] = float(value)
        except ValueError:
            raise typer.BadParameter(f"{item!r}: use NAME=WEIGHT, e.g. correctness=0.9", param_hint="--reward-weight")
    return weights


def _selection(agents, split, policy_versions, rewards, reward_weight, rules, default_rules, episode_timeout, policy=None,
               evaluation_rewards: bool = DEFAULTS.evaluation_rewards, evaluation: list[str] | None = None) -> dict:
    """BuildOptions fields of the selection options; a repeatable option not given is left to the dataclass."""
    from tracerl.pipeline.options import parse_policies

    options = {"agents": agents, "policy_versions": policy_versions, "default_rules": default_rules,
               "episode_timeout_s": episode_timeout, "evaluation_rewards": evaluation_rewards}
    if split:
        options["splits"] = tuple(split)
    if evaluation:
        options["evaluations"] = tuple(evaluation)
    if rewards:
        options["rewards"] = tuple(str(r) for r in rewards)
    if reward_weight:
        options["reward_weights"] = _weights(reward_weight)
    if rules:
        options["rules"] = str(rules)
    if policy:
        try:
            options["policies"] = parse_policies(policy)
        except PipelineInputError as exc:
            raise typer.BadParameter(str(exc), param_hint="--policy") from None
    return options


def _fail(exc: Exception) -> None:
    console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(2)


@app.command("build-dataset")
def build_dataset_cmd(
    spans: SpansOpt,
    out: Annotated[Path, typer.Option("--out", help="Dataset folder: transitions-*.parquet (see src/tracerl/pipeline/README.md).")],
    credit: Annotated[str, typer.Option(help=f"{' or '.join(CREDITS)} (identical: the paper's).")] = DEFAULTS.credit,
    gamma: Annotated[float, typer.Option(help="Discount for --credit discounted.")] = DEFAULTS.gamma,
    advantage: AdvantageOpt = DEFAULTS.advantage,
    agents: AgentsOpt = DEFAULTS.agents,
    policy: PolicyOpt = None,
    split: SplitOpt = None,
    policy_versions: VersionsOpt = DEFAULTS.policy_versions,
    rewards: RewardsOpt = None,
    reward_weight: WeightOpt = None,
    evaluation_rewards: EvaluationRewardsOpt = DEFAULTS.evaluation_rewards,
    evaluation: EvaluationOpt = None,
    rules: RulesOpt = DEFAULTS.rules,
    default_rules: DefaultRulesOpt = DEFAULTS.default_rules,
    episode_timeout: TimeoutOpt = DEFAULTS.episode_timeout_s,
    trajectory: Annotated[bool, typer.Option(help="Merge calls whose prompt extends the previous prompt + response.")] = DEFAULTS.trajectory,
    incremental: Annotated[bool, typer.Option(help="Only episodes not yet in OUT; append new files.")] = DEFAULTS.incremental,
    export: Annotated[Optional[list[str]], typer.Option(help=f"Also write {', '.join(EXPORTS)} beside OUT, as OUT-{EXPORTS[0]}/... (repeatable; sft and dpo: demonstrations and preference pairs).")] = None,
    sft_min_reward: Annotated[float, typer.Option(help="--export sft: the score from which a task's best episode is a demonstration.")] = DEFAULTS.sft_min_reward,
    dpo_min_margin: Annotated[float, typer.Option(help="--export dpo: the least score difference between chosen and rejected.")] = DEFAULTS.dpo_min_margin,
    retokenize: Annotated[Optional[str], typer.Option(metavar="TOKENIZER", help="The policy's model folder: calls captured without token ids (other instrumentations) get ids rebuilt from their messages, marked token_source=retokenized. Off by default: rebuilt ids can differ from those sampled.")] = DEFAULTS.retokenize,
    threads: Annotated[Optional[int], typer.Option(help="DuckDB threads (default: all cores).")] = DEFAULTS.threads,
    memory_limit: Annotated[str, typer.Option(help="DuckDB memory limit; beyond it DuckDB spills to disk (with --engine ray: each bucket's).")] = DEFAULTS.memory_limit,
    engine: Annotated[str, typer.Option(help="duckdb: one process on this machine; ray: in buckets on a Ray cluster (tracerl[ray]; the same rows).")] = "duckdb",
    ray_address: Annotated[Optional[str], typer.Option(help="--engine ray: the cluster (default $RAY_ADDRESS, else a local Ray).")] = None,
    buckets: Annotated[Optional[int], typer.Option(min=1, help="--engine ray: buckets to build apart (default: the cluster's CPUs).")] = None,
) -> None:
    """Turn spans into training transitions (one per policy LLM call) with credit and advantages."""
    if engine == "duckdb":
        if ray_address or buckets:
            _fail(ValueError("--ray-address and --buckets go with --engine ray"))
        from tracerl.pipeline.build import build_dataset as build
    elif engine == "ray":
        from tracerl.pipeline.ray_build import build_dataset_on_ray

        build = partial(build_dataset_on_ray, address=ray_address, buckets_count=buckets)
    else:
        _fail(ValueError(f"--engine must be duckdb or ray, got {engine!r}"))

    options = _selection(agents, split, policy_versions, rewards, reward_weight, rules, default_rules, episode_timeout, policy,
                         evaluation_rewards, evaluation)
    if export:
        options["exports"] = tuple(export)
    options |= {"sft_min_reward": sft_min_reward, "dpo_min_margin": dpo_min_margin}
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as bar:
        task = bar.add_task("starting", total=None)

        def progress(stage: str, total: int | None) -> None:
            bar.update(task, description=stage, total=total, completed=0)

        try:
            manifest = build(
                spans, out, progress=progress, on_rows=lambda n: bar.advance(task, n),
                credit=credit, gamma=gamma, advantage=advantage, trajectory=trajectory, incremental=incremental,
                retokenize=retokenize, threads=threads, memory_limit=memory_limit, **options,
            )
        except (PipelineInputError, ValueError) as exc:
            _fail(exc)
    counts = manifest["counts"]
    for note in manifest["warnings"]:
        console.print(f"[yellow]note:[/yellow] {note}")
    console.print(
        f"{counts['rows_written']} transition(s) from {counts['episodes']['emitted']} episode(s) "
        f"-> {out} ({manifest['seconds']:.1f} s); manifest: {out / MANIFEST}"
    )
    if not counts["rows_written"] and not incremental:
        console.print("[red]the dataset is empty[/red]: run `tracerl pipeline doctor --spans ...` for the reasons")
        raise typer.Exit(1)


@app.command()
def doctor(
    spans: SpansOpt,
    agents: AgentsOpt = DEFAULTS.agents,
    policy: PolicyOpt = None,
    split: SplitOpt = None,
    policy_versions: VersionsOpt = DEFAULTS.policy_versions,
    rewards: RewardsOpt = None,
    reward_weight: WeightOpt = None,
    evaluation_rewards: EvaluationRewardsOpt = DEFAULTS.evaluation_rewards,
    evaluation: EvaluationOpt = None,
    rules: RulesOpt = DEFAULTS.rules,
    default_rules: DefaultRulesOpt = DEFAULTS.default_rules,
    episode_timeout: TimeoutOpt = DEFAULTS.episode_timeout_s,
    advantage: AdvantageOpt = DEFAULTS.advantage,
    as_json: Annotated[bool, typer.Option("--json", help="Print the funnel and notes as JSON.")] = False,
) -> None:
    """Explain, with counts, why spans did (not) become transitions; takes build-dataset's selection options."""
    from tracerl.pipeline.doctor import diagnose

    options = _selection(agents, split, policy_versions, rewards, reward_weight, rules, default_rules, episode_timeout, policy,
                         evaluation_rewards, evaluation)
    try:
        with console.status("analysing spans"):
            report = diagnose(spans, BuildOptions(advantage=advantage, **options))
    except (PipelineInputError, ValueError) as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    table = Table(title=f"tracerl pipeline doctor: {spans}", show_header=False)
    for stage, count in report["funnel"]:
        table.add_row(stage, str(count))
    Console(soft_wrap=True).print(table)
    for note in report["notes"]:
        typer.echo(f"- {note}")


@app.command()
def judge(
    spans: SpansOpt,
    judge_url: Annotated[str, typer.Option("--judge-url", envvar=E.JUDGE_URL_ENV, help="OpenAI-compatible base URL of the judge, e.g. http://127.0.0.1:8000/v1 (vLLM, `tracerl serve`, a hosted API).")],
    judge_model: Annotated[str, typer.Option("--judge-model", envvar=E.JUDGE_MODEL_ENV, help="The model name the judge serves.")],
    rubric: Annotated[Optional[Path], typer.Option("--rubric", help="A text file: what makes an episode better (default: goal reached, then efficiency, then progress).")] = None,
    api_key: Annotated[Optional[str], typer.Option("--api-key", envvar=E.JUDGE_API_KEY_ENV, help="Bearer token for a hosted judge.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Folder for rewards/NAME.parquet and judgments/NAME.jsonl (default: the data dir itself, where every command finds them).")] = None,
    reward_name: Annotated[str, typer.Option("--reward-name", help="The rewards' name (build with --reward-weight NAME=1 to train on them alone).")] = "judge",
    split: SplitOpt = None,
    max_group: Annotated[int, typer.Option("--max-group", help="Most episodes compared in one judge call; a larger task group is split.")] = 8,
    max_prompt_chars: Annotated[int, typer.Option("--max-prompt-chars", help="Longest prompt sent, in characters; a longer episode is skipped (too_long).")] = 32_000,
    max_calls: Annotated[Optional[int], typer.Option("--max-calls", help="Stop after this many judge calls (retries count); the rest waits for the next run.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Judge calls in flight at once.")] = 4,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for one judge answer.")] = 120.0,
    episode_timeout: TimeoutOpt = DEFAULTS.episode_timeout_s,
    evaluation_events: Annotated[bool, typer.Option("--evaluation-events/--no-evaluation-events", help="Also write the scores as OpenTelemetry gen_ai.evaluation.result events in logs/, parented to each episode's span, for trace viewers (never read back as rewards).")] = False,
) -> None:
    """Score unlabelled episodes with a judge model, each task's episodes relative to each other; write them as rewards."""
    from tracerl.pipeline.judge import JudgeOptions
    from tracerl.pipeline.judge import judge as run_judge
    from tracerl.pipeline.judgment_log import endpoint

    try:
        text = rubric.read_text(encoding="utf-8") if rubric else None
        options = JudgeOptions(
            url=judge_url, model=judge_model, api_key=api_key, reward_name=reward_name, splits=tuple(split or ()),
            max_group=max_group, max_prompt_chars=max_prompt_chars, max_calls=max_calls, concurrency=concurrency,
            timeout_s=timeout, episode_timeout_s=episode_timeout, evaluation_events=evaluation_events, **({"rubric": text} if text else {}),
        )
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("starting", total=None)
            summary = run_judge(spans, options, out, lambda what, total, done: bar.update(task, description=what, total=total, completed=done))
    except (PipelineInputError, OSError) as exc:
        _fail(exc)
    for note in summary.messages(max_calls):
        console.print(f"[yellow]note:[/yellow] {note}")
    skipped = sum(summary.skipped.values())
    console.print(
        f"{summary.scored} episode(s) scored, {summary.failed} failed, {skipped} skipped, {summary.already_judged} judged before "
        f"({summary.calls} judge call(s), {summary.groups} group(s)) -> {summary.rewards_file}; judgments: {summary.judgments_file}"
    )
    if evaluation_events:
        console.print(f"{summary.evaluation_events} {A.GEN_AI_EVALUATION_RESULT_EVENT} event(s) written to {summary.events_folder}")
    if summary.failed and not summary.scored:  # a judge that is down or misconfigured is an error, not a run with no news
        console.print(
            f"[red]error:[/red] none of the {summary.failed} episode(s) sent could be judged ({summary.commonest_failures()}). "
            f"Check that --judge-url ({endpoint(judge_url)}) is reachable and serves --judge-model {judge_model} (or fix what the "
            "errors name), then run the command again: it sends the failed episodes again."
        )
        raise typer.Exit(1)


def register_sql(root: typer.Typer) -> None:
    """Add `tracerl sql` to the root CLI."""

    @root.command("sql")
    def sql_cmd(
        data: Annotated[
            Optional[str],
            typer.Argument(help="Data dir (holding spans/) or a folder of span files: local, or a URI such as s3://bucket/prefix."),
        ] = None,
        command: Annotated[Optional[str], typer.Option("-c", "--command", help="Run one query, print it, exit.")] = None,
        dataset: Annotated[Optional[Path], typer.Option(help="Dataset folder for the `transitions` view (default DATA/dataset for a local DATA).")] = None,
        output: Annotated[str, typer.Option("--format", help="table, csv or json (with -c).")] = "table",
        examples: Annotated[bool, typer.Option("--examples", help="Print example queries and exit.")] = False,
    ) -> None:
        """SQL over spans, llm_calls, episodes, rewards and transitions (a DuckDB shell, or -c QUERY once)."""
        from tracerl.pipeline.sql import EXAMPLES, open_views
        from tracerl.pipeline.shell import print_result, repl

        if examples:
            for title, query in EXAMPLES:
                typer.echo(f"-- {title}\n{query};\n")
            return
        if data is None:
            raise typer.BadParameter(
                "name the data to query (a data dir holding spans/, a folder of span files or a URI), or pass --examples",
                param_hint="DATA",
            )
        try:
            with console.status("building views"):
                con = open_views(data, dataset)
        except PipelineInputError as exc:
            _fail(exc)
        if command is None:
            repl(con)
            return
        try:
            print_result(con, command, output)
        except Exception as exc:  # DuckDB raises many types; all mean "this query is wrong"
            _fail(f"query failed: {exc}")


def register_report(root: typer.Typer) -> None:
    """Add `tracerl report` to the root CLI."""

    @root.command("report")
    def report_cmd(
        data: Annotated[str, typer.Argument(help="Data dir (holding spans/) or a folder of span files: local, or a URI such as s3://bucket/prefix.")],
        out: Annotated[Path, typer.Option("--out", help="The HTML file to write (one file: styles and charts inline).")] = Path("report.html"),
        runs: Annotated[Optional[Path], typer.Option("--runs", help="Runs folder holding metrics.jsonl (or the file): per-round training metrics.")] = None,
        rewards: RewardsOpt = None,
        rules: RulesOpt = DEFAULTS.rules,
        default_rules: DefaultRulesOpt = DEFAULTS.default_rules,
    ) -> None:
        """Write a static HTML page of how training goes: reward per policy version, agents, funnel, AIR, rounds.

        It shows every episode (no selection options): the funnel says what a default build would keep.
        """
        from tracerl.pipeline.report import write_report

        options = _selection(None, None, None, rewards, None, rules, default_rules, DEFAULTS.episode_timeout_s)
        try:
            with console.status("reading spans"):
                written = write_report(data, out, runs=runs, options=BuildOptions(**options))
        except (PipelineInputError, ValueError) as exc:
            _fail(exc)
        console.print(f"report: {written}")


def register(root: typer.Typer) -> None:
    """Add `tracerl pipeline`, `tracerl sql` and `tracerl report` to the root CLI."""
    root.add_typer(app, name="pipeline", help="Spans -> episodes -> training transitions.")
    register_sql(root)
    register_report(root)
