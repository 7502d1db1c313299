"""`tracerl pipeline` commands (also the `pipeline` console script) and `tracerl sql`."""

from __future__ import annotations

import json
from dataclasses import fields
from functools import partial
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from tracerl.core.commands import command_group
from tracerl.core.dataclass_options import config_from_options, with_options
from tracerl.pipeline.build_output import MANIFEST
from tracerl.pipeline.judge_options import JudgeOptions
from tracerl.pipeline.options import SELECTION, BuildOptions
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import attributes as A

app = command_group(no_args_is_help=True, help="Spans -> episodes -> training transitions.")


@app.callback()
def _group() -> None:
    """Spans -> episodes -> training transitions."""  # a callback keeps `pipeline CMD` a group


console = Console(stderr=True, soft_wrap=True)  # paths in messages stay copy-pasteable
DEFAULTS = BuildOptions()  # the build options' flags, help and defaults are its fields' (tracerl.pipeline.options)

# str, not Path: Path("s3://b/p") would become "s3:/b/p"
SpansOpt = Annotated[str, typer.Option(
    "--spans", help="Data dir (holding spans/) or a folder of span Parquet files: local, or a URI such as s3://bucket/prefix.")]


def _fail(exc: Exception) -> NoReturn:
    console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(2)


def _build_options(options: dict[str, Any]) -> BuildOptions:
    """The build options a command received (``BuildOptions``' own flags); options that cannot go together exit 2."""
    try:
        return config_from_options(DEFAULTS, options)
    except PipelineInputError as exc:
        _fail(exc)


@app.command("build-dataset")
@with_options(DEFAULTS)
def build_dataset_cmd(
    spans: SpansOpt,
    out: Annotated[Path, typer.Option("--out", help="Dataset folder: transitions-*.parquet (see src/tracerl/pipeline/README.md).")],
    engine: Annotated[str, typer.Option(help="duckdb: one process on this machine; ray: in buckets on a Ray cluster (tracerl[ray]; the same rows).")] = "duckdb",
    ray_address: Annotated[Optional[str], typer.Option(help="--engine ray: the cluster (default $RAY_ADDRESS, else a local Ray).")] = None,
    buckets: Annotated[Optional[int], typer.Option(min=1, help="--engine ray: buckets to build apart (default: the cluster's CPUs).")] = None,
    **options: Any,
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

    chosen = _build_options(options)
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as bar:
        task = bar.add_task("starting", total=None)

        def progress(stage: str, total: int | None) -> None:
            bar.update(task, description=stage, total=total, completed=0)

        try:
            manifest = build(spans, out, progress=progress, on_rows=lambda n: bar.advance(task, n),
                             **{f.name: getattr(chosen, f.name) for f in fields(chosen)})
        except (PipelineInputError, ValueError) as exc:
            _fail(exc)
    counts = manifest["counts"]
    for note in manifest["warnings"]:
        console.print(f"[yellow]note:[/yellow] {note}")
    console.print(
        f"{counts['rows_written']} transition(s) from {counts['episodes']['emitted']} episode(s) "
        f"-> {out} ({manifest['seconds']:.1f} s); manifest: {out / MANIFEST}"
    )
    if not counts["rows_written"] and not chosen.incremental:
        console.print("[red]the dataset is empty[/red]: run `tracerl pipeline doctor --spans ...` for the reasons")
        raise typer.Exit(1)


@app.command()
@with_options(DEFAULTS, only=SELECTION)
def doctor(
    spans: SpansOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Print the funnel and notes as JSON.")] = False,
    **options: Any,
) -> None:
    """Explain, with counts, why spans did (not) become transitions; takes build-dataset's selection options."""
    from tracerl.pipeline.doctor import diagnose

    chosen = _build_options(options)
    try:
        with console.status("analysing spans"):
            report = diagnose(spans, chosen)
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
@with_options(JudgeOptions)
def judge(
    spans: SpansOpt,
    out: Annotated[Optional[Path], typer.Option("--out", help="Folder for rewards/NAME.parquet and judgments/NAME.jsonl (default: the data dir itself, where every command finds them).")] = None,
    **options: Any,
) -> None:
    """Score unlabelled episodes with a judge model, each task's episodes relative to each other; write them as rewards."""
    from tracerl.pipeline.judge import judge as run_judge
    from tracerl.pipeline.judgment_log import endpoint

    try:
        chosen: JudgeOptions = config_from_options(JudgeOptions, options)
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("starting", total=None)
            summary = run_judge(spans, chosen, out, lambda what, total, done: bar.update(task, description=what, total=total, completed=done))
    except (PipelineInputError, OSError) as exc:
        _fail(exc)
    for note in summary.messages(chosen.max_calls):
        console.print(f"[yellow]note:[/yellow] {note}")
    skipped = sum(summary.skipped.values())
    console.print(
        f"{summary.scored} episode(s) scored, {summary.failed} failed, {skipped} skipped, {summary.already_judged} judged before "
        f"({summary.calls} judge call(s), {summary.groups} group(s)) -> {summary.rewards_file}; judgments: {summary.judgments_file}"
    )
    if chosen.evaluation_events:
        console.print(f"{summary.evaluation_events} {A.GEN_AI_EVALUATION_RESULT_EVENT} event(s) written to {summary.events_folder}")
    if summary.failed and not summary.scored:  # a judge that is down or misconfigured is an error, not a run with no news
        console.print(
            f"[red]error:[/red] none of the {summary.failed} episode(s) sent could be judged ({summary.commonest_failures()}). "
            f"Check that --judge-url ({endpoint(chosen.url)}) is reachable and serves --judge-model {chosen.model} (or fix what the "
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
    @with_options(DEFAULTS, only=("rewards", "rules", "default_rules"))
    def report_cmd(
        data: Annotated[str, typer.Argument(help="Data dir (holding spans/) or a folder of span files: local, or a URI such as s3://bucket/prefix.")],
        out: Annotated[Path, typer.Option("--out", help="The HTML file to write (one file: styles and charts inline).")] = Path("report.html"),
        runs: Annotated[Optional[Path], typer.Option("--runs", help="Runs folder holding metrics.jsonl (or the file): per-round training metrics.")] = None,
        **options: Any,
    ) -> None:
        """Write a static HTML page of how training goes: reward per policy version, agents, funnel, AIR, rounds.

        It shows every episode (no selection options): the funnel says what a default build would keep.
        """
        from tracerl.pipeline.report import write_report

        chosen = _build_options(options)
        try:
            with console.status("reading spans"):
                written = write_report(data, out, runs=runs, options=chosen)
        except (PipelineInputError, ValueError) as exc:
            _fail(exc)
        console.print(f"report: {written}")


def register(root: typer.Typer) -> None:
    """Add `tracerl pipeline`, `tracerl sql` and `tracerl report` to the root CLI."""
    root.add_typer(app, name="pipeline", help="Spans -> episodes -> training transitions.")
    register_sql(root)
    register_report(root)
