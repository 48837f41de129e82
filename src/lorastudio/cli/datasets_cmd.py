"""`lorastudio datasets list|import DIR [--name N]`: the studio's dataset folders."""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.cli.tables import print_table

datasets_app = typer.Typer(
    help="Dataset folders under the studio home.", no_args_is_help=True, rich_markup_mode=None
)


def register(app: typer.Typer) -> None:
    app.add_typer(datasets_app, name="datasets")


@datasets_app.command("list")
def list_cmd() -> None:
    """List the dataset folders with their image and caption counts."""
    from lorastudio.data.uploads import list_datasets
    from lorastudio.settings import get_settings

    settings = get_settings()
    found = list_datasets(settings.datasets_dir)
    if not found:
        typer.echo(f"no datasets in {settings.datasets_dir}")
        return
    rows = [[d["name"], str(d["images"]), str(d["captions"]), d["path"]] for d in found]
    print_table(("name", "images", "captions", "path"), rows, keep=("name",))


@datasets_app.command("import")
def import_cmd(
    source: Path = typer.Argument(..., exists=True, file_okay=False, dir_okay=True, help="folder to import"),
    name: str | None = typer.Option(None, "--name", help="dataset name (default: the folder's name)"),
) -> None:
    """Copy a folder's images, .txt captions and metadata.jsonl into datasets/<name>. Every file
    is checked first; nothing is written unless all pass. Other files and symbolic links (never
    followed) are skipped (listed)."""
    from lorastudio.data import resolve_dataset_dir, safe_component
    from lorastudio.data.safe_open import open_in_folder
    from lorastudio.data.uploads import UploadBatch, dataset_summary, upload_kind
    from lorastudio.errors import DatasetError
    from lorastudio.settings import get_settings

    settings = get_settings().ensure_dirs()
    dataset = safe_component(name or source.resolve().name, field="--name")
    target = resolve_dataset_dir(dataset, settings.datasets_dir, allow_outside_root=False)
    source = source.resolve()  # the folder the user named may be a link; links inside it are not followed
    entries = sorted(p for p in source.iterdir() if not p.name.startswith("."))
    links = [p.name for p in entries if p.is_symlink()]
    files = [p for p in entries if not p.is_symlink() and p.is_file()]
    wanted, skipped = [], []
    for path in files:
        try:
            upload_kind(path.name)
            wanted.append(path)
        except DatasetError:
            skipped.append(path.name)
    with UploadBatch(
        settings.datasets_dir, target, settings.max_image_pixels, settings.max_decode_pixels
    ) as batch:
        for path in wanted:
            with open_in_folder(path) as fh:  # refuses a file swapped for a link meanwhile
                batch.add(path.name, fh)
        committed = batch.commit()
    summary = dataset_summary(target)
    typer.echo(f"imported {len(committed)} file(s) into {target}")
    typer.echo(f"dataset {summary['name']}: {summary['images']} image(s), {summary['captions']} captioned")
    for skip in skipped:
        typer.echo(f"skipped {skip} (not an image, .txt caption or metadata.jsonl)")
    for link in links:
        typer.echo(f"skipped {link} (a symbolic link: links are not followed)")
