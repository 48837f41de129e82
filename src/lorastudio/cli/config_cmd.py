"""`lorastudio config import FILE [--from FORMAT] [--family F] [--base-model M] [--out run.toml] [--json]`: another
trainer's config as a lorastudio run config (lorastudio/config_import), with a report of every
one of its settings."""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.cli.json_out import JsonCommand
from lorastudio.cli.user_path_args import user_path

config_app = typer.Typer(
    help="Training configs: bring one from another trainer.", no_args_is_help=True, rich_markup_mode=None
)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")


@config_app.command("import", cls=JsonCommand)
def import_cmd(
    file: Path = typer.Argument(
        ..., callback=user_path, help="the other trainer's config (.yaml, .yml, .toml or .json)"
    ),
    source: str | None = typer.Option(
        None, "--from", help="its trainer: ai-toolkit, kohya, simpletuner or onetrainer (default: detected)"
    ),
    family: str | None = typer.Option(
        None, "--family", help="the family to train (default: the one the file names)"
    ),
    base: str | None = typer.Option(
        None, "--base-model", help="the base model to train (default: the one the file names)"
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        callback=user_path,
        help="write the run config to this new .toml or .json file (default: print it)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the report (and the config) as JSON"),
) -> None:
    """Read another trainer's config (ai-toolkit's YAML job, kohya sd-scripts' / musubi-tuner's
    arguments with their dataset_config, SimpleTuner's config.json, OneTrainer's exported JSON) and
    write a lorastudio run config that `lorastudio train --check` accepts, with a report of every
    one of its settings: carried, changed in meaning (how), or not carried (why). Without --out the
    config is printed on stdout and the report on stderr. Exits 2 when refused (the reasons named)."""
    from lorastudio.cli.json_out import json_errors, print_json
    from lorastudio.config_import import import_config
    from lorastudio.errors import ConfigError, FieldProblem

    with json_errors(as_json):
        toml = out is None or out.suffix.lower() != ".json"
        if out is not None and out.suffix.lower() not in (".toml", ".json"):
            raise ConfigError([FieldProblem("--out", f"{out.name}: write a .toml or .json run config")])
        if out is not None:
            _check_new(out)
        result = import_config(file, source, family, toml=toml, base=base)
        if out is not None:
            _write_new(out, result.text)
    counts = {
        kind: sum(1 for line in result.lines if line.outcome == kind)
        for kind in ("carried", "changed", "not carried")
    }
    if as_json:
        print_json({"from": result.kind, "config": result.settings, "written": str(out) if out else None,
                    "report": [line.as_json() for line in result.lines], "counts": counts})  # fmt: skip
        return
    summary = (
        f"{file.name} ({result.kind}): {counts['carried']} carried, {counts['changed']} changed in meaning,"
        f" {counts['not carried']} not carried"
    )
    report = "\n".join([*(line.text() for line in result.lines), summary])
    if out is None:
        typer.echo(result.text, nl=False)
        typer.echo(report, err=True)
        return
    typer.echo(report)
    typer.echo(f"written to {out}: check it with `lorastudio train {out} --check`")


def _check_new(path: Path) -> None:
    """Refuse an --out `path` that exists or whose folder does not (ConfigError)."""
    import os

    from lorastudio.errors import ConfigError, FieldProblem

    if os.path.lexists(path):
        raise ConfigError([FieldProblem("--out", f"{path} already exists: choose another file")])
    if not path.parent.is_dir():
        raise ConfigError([FieldProblem("--out", f"{path.parent} is not a folder")])


def _write_new(path: Path, text: str) -> None:
    """Write `text` to the new file `path`: staged beside it, then linked into place (an existing
    file, even one made meanwhile, is never replaced); nothing is left behind on a failure."""
    import os

    from lorastudio.errors import ConfigError, FieldProblem, writing

    staged = path.with_name(f".{path.name}.part")
    try:
        with writing(f"the run config {path.name} could not be written", path):
            staged.write_text(text, encoding="utf-8")
            try:
                os.link(staged, path)  # fails when `path` exists: never replaced
            except FileExistsError:
                raise ConfigError(
                    [FieldProblem("--out", f"{path} already exists: choose another file")]
                ) from None
    finally:
        staged.unlink(missing_ok=True)
