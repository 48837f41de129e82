"""`lorastudio families`, `lorastudio paths` and `lorastudio du`: what this install knows, where it
keeps things and what takes the space (home_usage.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from lorastudio.cli.tables import print_table

if TYPE_CHECKING:
    from lorastudio.families.spec import FamilySpec


def register(app: typer.Typer) -> None:
    app.command("families")(families_cmd)
    app.command("paths")(paths_cmd)
    app.command("du")(du_cmd)


def families_cmd() -> None:
    """List the model families lorastudio can train, with the flavours each tells apart in a
    checkpoint, their defaults, the family-specific settings each one honours (the others are
    refused for it) and how its pipeline generates (guidance, negative prompt)."""
    from lorastudio import families
    from lorastudio.config import FAMILY_SPECIFIC_FIELDS

    rows = []
    for fam in families.all_families():
        s = fam.spec
        own = ", ".join(f for f in FAMILY_SPECIFIC_FIELDS if f in s.supports)
        # the flavours it tells apart in a checkpoint (FamilySpec.variants), one per line
        title = "\n".join([s.title, *(f"- {v.title}" for v in s.variants)])
        defaults = ", ".join(f"{k}={v}" for k, v in s.defaults.items())
        rows.append([s.name, title, s.objective, defaults, own, _generation(s)])
    header = ("family", "title", "objective", "defaults", "family settings", "generate")
    print_table(header, rows, keep=("family",))


def _generation(spec: FamilySpec) -> str:
    """How the family's pipeline takes a guidance scale (`generate --guidance`: cfg, true_cfg or
    embedded, as /api/info's `guidance`, and its default) and whether it takes a negative prompt
    (`generate --negative`, refused for the others)."""
    default = spec.generation_defaults.get(spec.guidance_kwarg)
    guidance = spec.guidance + (f" {default}" if default is not None else "")
    return guidance + ("; negative prompt" if spec.negative_prompt else "; no negative prompt")


def paths_cmd() -> None:
    """Show the studio home and its folders (set LORASTUDIO_HOME to move them)."""
    from lorastudio.data.disk_cache import cache_root
    from lorastudio.settings import get_settings

    s = get_settings()
    for label, p in [
        ("home", s.home),
        ("datasets", s.datasets_dir),
        ("outputs", s.outputs_dir),
        ("models", s.models_dir),
        ("database", s.db_path),
        ("cache", cache_root(s)),
    ]:
        typer.echo(f"{label:9} {p}")


def du_cmd(
    top: int = typer.Option(
        5, "--top", min=0, max=1000, help="also list this many of the largest runs and datasets"
    ),
) -> None:
    """Show what takes the space of the studio home: each part (runs, gallery, datasets, models,
    caches, logs, the run store) with its files and size, largest first, and how it shrinks;
    then the largest run folders and datasets. Read-only: safe while a server runs."""
    from lorastudio.home_usage import home_usage, largest_entries
    from lorastudio.settings import get_settings

    s = get_settings()
    unread: list[Path] = []
    parts = home_usage(s, unread)
    typer.echo(f"home: {s.home}")
    rows = [[_part(u.path, s.home), str(u.files), _size(u.bytes), u.what] for u in parts]
    print_table(("part", "files", "size", "what it is, how it shrinks"), rows, keep=("part", "size"))
    typer.echo(f"total: {sum(u.files for u in parts)} files, {_size(sum(u.bytes for u in parts))}")
    for label, folder in (("runs", s.outputs_dir), ("datasets", s.datasets_dir)):
        largest = largest_entries(folder, top, unread) if top else []
        if largest:
            typer.echo(f"largest {label}:")
            print_table(
                ("name", "files", "size"), [[u.path.name, str(u.files), _size(u.bytes)] for u in largest]
            )
    for folder in sorted(set(unread)):
        typer.echo(f"not counted (cannot be read): {folder}", err=True)


def _part(path: Path, home: Path) -> str:
    if path == home:
        return "(other)"
    return path.relative_to(home).as_posix() if path.is_relative_to(home) else str(path)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
