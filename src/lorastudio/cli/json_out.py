"""Machine-readable output of the commands that take `--json` (`runs show`, `models list`): the
value as JSON on stdout, and with --json an error is JSON too: `{"error": CLASS, "detail": MESSAGE}`
on stdout (the API's error body), the usual "error: ..." line on stderr and the usual status
(2), so that `lorastudio runs show ID --json | jq` never reads an empty or half document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from lorastudio.errors import LorastudioError


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout, a non-finite float as null (json writes NaN, no JSON)."""
    from lorastudio.jobs.records import sanitize

    typer.echo(json.dumps(sanitize(value), indent=2, allow_nan=False))


@contextmanager
def json_errors(enabled: bool) -> Iterator[None]:
    """With `enabled`, a LorastudioError raised in the block is also printed as JSON on stdout,
    then raised on (cli/app.main prints it on stderr and exits 2)."""
    try:
        yield
    except LorastudioError as err:
        if enabled:
            print_json({"error": type(err).__name__, "detail": str(err)})
        raise
