"""The studio home held exclusively by a command that changes what a server or a run may be
reading (`datasets delete|rename|captions`, `models rm`, `cache clear|prune`): refused, exit 1,
while a server owns the home or a `lorastudio train` runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from lorastudio.jobs.homelock import HomeLock


def exclusive_home(home: Path, command: str, not_done: str) -> HomeLock:
    """HomeLock.for_command(home, command), to be entered by the caller; when the home is in use,
    prints "`not_done`: <who holds it>" on stderr and exits 1."""
    from lorastudio.errors import HomeInUse
    from lorastudio.jobs.homelock import HomeLock

    try:
        return HomeLock.for_command(home, command)
    except HomeInUse as err:
        typer.echo(f"{not_done}: {err}", err=True)
        raise typer.Exit(1) from None
