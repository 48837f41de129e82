"""`lorastudio families` and `lorastudio paths`: what this install knows and where it keeps things."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table


def register(app: typer.Typer) -> None:
    app.command("families")(families_cmd)
    app.command("paths")(paths_cmd)


def families_cmd() -> None:
    """List the model families lorastudio can train, with their defaults."""
    from lorastudio import families

    table = Table("family", "title", "objective", "defaults")
    for fam in families.all_families():
        s = fam.spec
        table.add_row(s.name, s.title, s.objective, ", ".join(f"{k}={v}" for k, v in s.defaults.items()))
    Console().print(table)


def paths_cmd() -> None:
    """Show the studio home and its folders (set LORASTUDIO_HOME to move them)."""
    from lorastudio.settings import get_settings

    s = get_settings()
    for label, p in [
        ("home", s.home),
        ("datasets", s.datasets_dir),
        ("outputs", s.outputs_dir),
        ("models", s.models_dir),
        ("database", s.db_path),
    ]:
        typer.echo(f"{label:9} {p}")
