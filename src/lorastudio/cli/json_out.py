"""Machine-readable output of the commands that take `--json` (`runs show`, `models list`): the
value as JSON on stdout, and with --json an error is JSON too: `{"error": CLASS, "detail": MESSAGE}`
on stdout (the API's error body), the usual "error: ..." line on stderr and the usual status
(2), so that `lorastudio runs show ID --json | jq` never reads an empty or half document. A
usage error of such a command given --json (`runs show --json` without its ID, an unknown
option, a value out of range) is `{"error": "UsageError", "detail": ...}` likewise (JsonCommand):
before, stdout was empty."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from typer.core import TyperCommand

from lorastudio.errors import LorastudioError

# click's UsageError (typer carries its own copy of click, whose modules are private): the base of
# every parse error, the one class that BadParameter, NoSuchOption and MissingParameter share
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


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


class JsonCommand(TyperCommand):
    """A typer command with a --json flag: a usage error while its arguments are parsed is also
    printed as JSON on stdout when --json is among them (before a `--`), then raised on (click
    prints its usage message on stderr and exits 2)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = args[: args.index("--")] if "--" in args else args
        try:
            return super().parse_args(ctx, list(args))
        except _USAGE_ERROR as err:
            if "--json" in given:
                print_json({"error": "UsageError", "detail": err.format_message()})
            raise
