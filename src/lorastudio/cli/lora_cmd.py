"""`lorastudio lora convert IN OUT --to kohya|diffusers [--family F]`: rewrite a LoRA file in the
other key layout (diffusers/peft <-> kohya/ComfyUI), keeping its training metadata."""

from __future__ import annotations

from pathlib import Path

import typer

lora_app = typer.Typer(
    help="LoRA files: convert between diffusers and kohya/ComfyUI layouts.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(lora_app, name="lora")


@lora_app.command("convert")
def convert_cmd(
    src: Path = typer.Argument(..., help="the LoRA .safetensors to read"),
    dst: Path = typer.Argument(..., help="the .safetensors to write (must not exist unless --force)"),
    to: str = typer.Option(..., "--to", help="target layout: kohya or diffusers"),
    family: str | None = typer.Option(None, "--family", help="model family (default: from the file header)"),
    force: bool = typer.Option(False, "--force", help="replace DST if it exists"),
) -> None:
    """Convert a LoRA file between the diffusers and kohya/ComfyUI key layouts (lossless)."""
    from lorastudio.lora.files import convert_file

    source = convert_file(src, dst, to, family, overwrite=force)  # type: ignore[arg-type]
    typer.echo(f"{src} ({source}) -> {dst} ({to})")
