"""`lorastudio families` and `lorastudio paths`: what this install knows and where it keeps things."""

from __future__ import annotations

import typer

from lorastudio.cli.tables import print_table


def register(app: typer.Typer) -> None:
    app.command("families")(families_cmd)
    app.command("paths")(paths_cmd)


def families_cmd() -> None:
    """List the model families lorastudio can train, with the flavours each tells apart in a
    checkpoint, their defaults and the family-specific settings each one honours (the others are
    refused for it)."""
    from lorastudio import families
    from lorastudio.config import FAMILY_SPECIFIC_FIELDS

    rows = []
    for fam in families.all_families():
        s = fam.spec
        own = ", ".join(f for f in FAMILY_SPECIFIC_FIELDS if f in s.supports)
        # the flavours it tells apart in a checkpoint (FamilySpec.variants), one per line
        title = "\n".join([s.title, *(f"- {v.title}" for v in s.variants)])
        rows.append([s.name, title, s.objective, ", ".join(f"{k}={v}" for k, v in s.defaults.items()), own])
    print_table(("family", "title", "objective", "defaults", "family settings"), rows, keep=("family",))


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
