"""`lorastudio datasets delete NAME|rename NAME TO|captions NAME`: the dataset commands that change a
dataset folder in place. Each holds the studio home exclusively meanwhile (jobs/homelock.py), so it
is refused while a server owns the home (its API does the same, refused while a job uses the
dataset) or a `lorastudio train` runs. Split from cli/datasets_cmd.py (the group, `list`, `import`);
registered on its group by cli/app.py, after its own commands, so `--help` lists them in the same
order."""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.cli.confirm import confirm_or_stop


def register(datasets_app: typer.Typer) -> None:
    datasets_app.command("delete")(delete_cmd)
    datasets_app.command("rename")(rename_cmd)
    datasets_app.command("captions")(captions_cmd)


def delete_cmd(
    name: str = typer.Argument(
        ..., help="dataset name under the studio's datasets folder (one that starts with '-' goes after '--')"
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
) -> None:
    """Delete datasets/<NAME> with every file in it. The command holds the studio home
    exclusively meanwhile, so it is refused while a server owns the home (delete through it:
    the UI or DELETE /api/datasets/NAME, which refuses while a job uses the dataset) or a
    `lorastudio train` runs."""
    from lorastudio.cli.exclusive_home import exclusive_home
    from lorastudio.data.dataset_delete import delete_dataset
    from lorastudio.settings import get_settings

    settings = get_settings().ensure_dirs()
    lock = exclusive_home(
        settings.home, "datasets delete", f"dataset {name} not deleted"
    )  # no server, no run meanwhile
    with lock:
        _check_dataset_exists(settings.datasets_dir, name)  # before asking to delete it
        if not yes:
            confirm_or_stop(f"delete dataset {name} and every file in it?", f"dataset {name} not deleted")
        # the lock excludes every job
        left = delete_dataset(
            settings.datasets_dir, name, in_use=set, decoded_dir=settings.decoded_record_dir
        )
    typer.echo(f"deleted dataset {name}")
    if left:
        typer.echo(f"warning: {left}", err=True)


def _check_dataset_exists(root: Path, name: str) -> None:
    """Raise DatasetNotFound (or a bad name's ConfigError) unless `name` is a dataset under `root`, as
    delete_dataset would, before the command asks to delete it."""
    from lorastudio.data import safe_component
    from lorastudio.data.dataset_names import hand_named_folder
    from lorastudio.errors import DatasetNotFound
    from lorastudio.user_paths import is_dir, lexists

    if hand_named_folder(root, name) is not None:
        return
    folder = root / safe_component(name, field="dataset name")
    if not (is_dir(folder) or (lexists(folder) and folder.is_symlink())):
        raise DatasetNotFound(name)


def rename_cmd(
    name: str = typer.Argument(
        ..., help="the folder's name as `datasets list` shows it (one that starts with '-' goes after '--')"
    ),
    to: str = typer.Argument(..., help="its new name (the rules of a new dataset's name)"),
) -> None:
    """Rename datasets/<NAME> to TO in one step: how a folder copied in under a name the studio
    cannot use (`datasets list` marks it unusable) becomes a dataset. Like `delete`, it holds the
    studio home exclusively, so it is refused while a server owns it (rename through the UI or
    POST /api/datasets/NAME/rename) or a run trains; TO must be free."""
    from lorastudio.cli.exclusive_home import exclusive_home
    from lorastudio.data.dataset_names import rename_dataset
    from lorastudio.data.paths import shown_name
    from lorastudio.settings import get_settings

    settings = get_settings().ensure_dirs()
    lock = exclusive_home(
        settings.home, "datasets rename", f"dataset {shown_name(name)!r} not renamed"
    )  # no server, no run meanwhile
    with lock:  # it excludes every job
        new = rename_dataset(
            settings.datasets_dir, name, to, in_use=set, field="TO", decoded_dir=settings.decoded_record_dir
        )
    typer.echo(f"renamed dataset {shown_name(name)!r} to {new!r}")


def captions_cmd(
    name: str = typer.Argument(
        ..., help="dataset name under the studio's datasets folder (one that starts with '-' goes after '--')"
    ),
    find: str = typer.Option("", "--find", help="text to replace (plain text, every occurrence)"),
    replace: str = typer.Option("", "--replace", help="what replaces --find"),
    prepend: str = typer.Option("", "--prepend", help="put in front of every caption, as typed"),
    append: str = typer.Option("", "--append", help="put at the end of every caption, as typed"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show what would change, write nothing"),
) -> None:
    """Edit every caption of datasets/NAME at once: --find/--replace, then --prepend, then
    --append (all or nothing; each file staged and renamed). Like `delete`, it holds the studio
    home exclusively, so it is refused while a server owns it (edit through the UI or POST
    /api/datasets/NAME/captions, refused while a job uses the dataset) or a run trains."""
    from lorastudio.cli.exclusive_home import exclusive_home
    from lorastudio.data import resolve_dataset_dir, safe_component
    from lorastudio.data.caption_bulk import CaptionEdit, bulk_edit_captions
    from lorastudio.settings import get_settings

    settings = get_settings().ensure_dirs()
    folder = resolve_dataset_dir(
        safe_component(name, field="NAME"), settings.datasets_dir, allow_outside_root=False
    )
    lock = exclusive_home(settings.home, "datasets captions", f"captions of {name} not edited")
    with lock:
        edit = CaptionEdit(find=find, replace=replace, prepend=prepend, append=append)
        result = bulk_edit_captions(folder, edit, dry_run=dry_run)
    verb = "would change" if dry_run else "changed"
    typer.echo(f"{verb} {len(result.changed)} of {result.captions} caption(s) in {name}")
    for file, before, after in result.examples:
        typer.echo(f"  {file}: {before!r} -> {after!r}")
