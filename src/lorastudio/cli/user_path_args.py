"""`~` in a path typed on the command line, expanded as a config file's paths are.

A shell expands `~/x` only at the start of a word: `--out=~/x`, `"~/my data"` (quoted for its
space) and a script's `"$DIR"` holding `~/x` reach the command with the `~` as typed. click's Path
type keeps it, so `tiny dataset --out=~/ds` wrote a folder literally named `~` in the current
folder (a `rm -rf ~` waiting to happen), `train "~/run.toml"` said "not found" and `lora convert
A ~/B` "the folder ~ does not exist", while a config file's data_dir, base_model and init_lora and
`lora merge FILE` expand it (cli/config_file.localize_path, user_paths.expand_user). Every Path
argument and option of the CLI takes `callback=user_path` (a rule test walks the command tree);
one that must name an existing folder takes `callback=existing_folder` instead of click's
`exists=True`, which checks the `~` as typed before any callback runs.
"""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.user_paths import expand_user, is_dir, lexists


def user_path(value: Path | list[Path] | None) -> Path | list[Path] | None:
    """typer callback: `value` (a Path, a repeatable option's list, or None) with a leading `~`
    or `~name` expanded (user_paths.expand_user: as typed when it names no user's home)."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [expand_user(item) for item in value]
    return expand_user(value)


def existing_folder(value: Path | None) -> Path | None:
    """typer callback: user_path's `value`, refused as click's `exists=True, file_okay=False`
    refuses it (a usage error, status 2) when it is not an existing folder."""
    path = user_path(value)
    if path is None:
        return None
    if not is_dir(path):  # user_paths: never raises (a name too long, an unsearchable folder)
        what = "is not a folder" if lexists(path) else "does not exist"
        raise typer.BadParameter(f"folder '{path}' {what}.")
    return path  # type: ignore[return-value]
