"""`lorastudio tiny model` and `lorastudio tiny dataset`: tiny offline models and a sample dataset.

Both write atomically and are idempotent; a domain error (bad family, occupied folder) propagates
to `cli.app.main`, which prints it and exits non-zero.
"""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.cli.user_path_args import user_path

tiny_app = typer.Typer(
    help="Tiny random-weight models of every family and a sample dataset, built offline.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def register(app: typer.Typer) -> None:
    app.add_typer(tiny_app, name="tiny")


@tiny_app.command("model")
def model_cmd(
    family: str = typer.Option(
        ..., "--family", "-f", help="a family with a tiny model (lorastudio families)"
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        callback=user_path,
        help="pipeline folder to write (default: <models>/tiny-<family>)",
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="weights seed (same seed, same files)"),
) -> None:
    """Write a tiny diffusers pipeline of FAMILY (loads with DiffusionPipeline.from_pretrained)."""
    from lorastudio import tiny
    from lorastudio.cli.run_display import quiet_libraries
    from lorastudio.errors import UnknownFamily
    from lorastudio.settings import get_settings

    if family not in tiny.TINY_FAMILIES:  # refused at once, before the libraries load
        raise UnknownFamily(family, list(tiny.TINY_FAMILIES))
    quiet_libraries()  # before the libraries load: no info lines or shard progress bars
    target = out if out is not None else tiny.tiny_model_dir(family, get_settings().models_dir)
    path = tiny.save_tiny_model(family, target, seed=seed)
    typer.echo(str(path))


@tiny_app.command("dataset")
def dataset_cmd(
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        callback=user_path,
        help="dataset folder to write (default: <datasets>/tiny-shapes)",
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="layout seed (same seed, same files)"),
    paired: bool = typer.Option(
        False, "--paired", help="the edit dataset: targets + control/ images + instructions"
    ),
) -> None:
    """Write the sample dataset: 8 PNG images of coloured shapes with .txt captions (with
    --paired: colour-inverted targets, the originals in control/, "invert the colours ..." captions)."""
    from lorastudio import tiny
    from lorastudio.settings import get_settings

    if paired:
        from lorastudio.tiny.paired import PAIRED_DATASET_NAME, make_paired_dataset

        target = out if out is not None else get_settings().datasets_dir / PAIRED_DATASET_NAME
        typer.echo(str(make_paired_dataset(target, seed=seed)))
        return
    target = out if out is not None else get_settings().datasets_dir / tiny.SAMPLE_DATASET_NAME
    path = tiny.make_sample_dataset(target, seed=seed)
    typer.echo(str(path))


@tiny_app.command("vlm")
def vlm_cmd(
    out: Path | None = typer.Argument(
        None, callback=user_path, help="folder to write (default: <models>/tiny-vlm)"
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="weights seed (same seed, same files)"),
    florence: bool = typer.Option(False, "--florence", help="a tiny Florence-2 instead of Qwen2.5-VL"),
) -> None:
    """Write a tiny random Qwen2.5-VL (or Florence-2) captioner (model + processor; use it with
    `datasets caption --model PATH`)."""
    from lorastudio.cli.run_display import quiet_libraries

    quiet_libraries()
    from lorastudio.settings import get_settings
    from lorastudio.tiny.vlm import TINY_VLM_NAME, save_tiny_vlm

    target = out if out is not None else get_settings().models_dir / TINY_VLM_NAME
    kind = "florence2" if florence else "qwen2_5_vl"
    typer.echo(str(save_tiny_vlm(target, seed=seed, kind=kind)))
