"""`lorastudio families` and `lorastudio paths`: what this install knows and where it keeps things."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from lorastudio.cli.tables import print_table

if TYPE_CHECKING:
    from lorastudio.families.spec import FamilySpec


def register(app: typer.Typer) -> None:
    app.command("families")(families_cmd)
    app.command("paths")(paths_cmd)


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
