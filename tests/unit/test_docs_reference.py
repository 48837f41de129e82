"""README's settings reference and the CLI's help are true to the code.

- README's "Settings reference" block is exactly what `lorastudio.config_reference` renders from
  TrainConfig (so every field is listed with its default, values and description), and every
  field has a description (the API schema, /docs and the web form's tooltips show it).
- The defaults README states are the ones a run gets: a minimal config resolved for each family
  has, field by field, the value README's default column gives for that family.
- Every option and argument of every `lorastudio` command has a help line that says what it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel

from lorastudio import families
from lorastudio.cli.app import _register, app
from lorastudio.config import FAMILY_SPECIFIC_FIELDS, TrainConfig, resolve_train_config
from lorastudio.config_datasets import DatasetEntry
from lorastudio.config_preservation import Preservation
from lorastudio.config_reference import END, START, _value, reference_markdown
from lorastudio.config_samples import SamplePrompt

README = Path(__file__).resolve().parents[2] / "README.md"

# Fields whose unset value is computed from other settings (their descriptions say how), not a default.
DERIVED = {"lora_alpha", "cache_variants", "output_name", "huber_c", "huber_schedule"}


def _readme_block() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index(START) : text.index(END) + len(END)]


def test_readme_settings_reference_is_the_rendered_one():
    assert _readme_block() == reference_markdown(), (
        "README's settings reference is stale: run `python -m lorastudio.config_reference README.md`"
    )


@pytest.mark.parametrize("model", [TrainConfig, DatasetEntry, Preservation, SamplePrompt])
def test_every_field_has_a_description_and_a_readme_row(model: type[BaseModel]):
    undescribed = [n for n, f in model.model_fields.items() if not (f.description or "").strip()]
    assert undescribed == []
    rows = set(re.findall(r"^\| `([a-z_0-9]+)` \|", _readme_block(), re.M))
    assert set(model.model_fields) <= rows


def _readme_defaults() -> dict[str, str]:
    """field -> its default cell, for TrainConfig's own tables (the first row of each name)."""
    out: dict[str, str] = {}
    for name, cell in re.findall(r"^\| `([a-z_0-9]+)` \| ([^|]*?) \|", _readme_block(), re.M):
        out.setdefault(name, cell)
    return out


def _expected(cell: str, family: str) -> str:
    """The value a default cell gives for `family`: "16; flux2-klein: 32", "1024 (every family)"."""
    head, *rest = [part.strip() for part in cell.split(";")]
    for part in rest:
        names, value = part.split(": ", 1)
        if family in names.split(", "):
            return value
    return head.removesuffix(" (every family)")


@pytest.mark.parametrize("family", families.names())
def test_the_readme_defaults_are_what_a_run_gets(family: str):
    minimal = TrainConfig(family=family, base_model="some/model", data_dir="data")
    resolved = resolve_train_config(minimal)
    supports = families.get(family).spec.supports
    cells = _readme_defaults()
    checked = 0
    for name in TrainConfig.model_fields:
        if name in DERIVED or name in minimal.model_fields_set:
            continue
        if name in FAMILY_SPECIFIC_FIELDS and name not in supports:
            continue  # refused for this family (the row says so)
        assert _value(getattr(resolved, name)) == _expected(cells[name], family), name
        checked += 1
    assert checked > 80


def _commands() -> list[tuple[str, object]]:
    _register()
    root = typer.main.get_command(app)
    out: list[tuple[str, object]] = []

    def walk(cmd, path: str, parent) -> None:
        ctx = cmd.context_class(cmd, info_name=path.split()[-1], parent=parent)
        out.append((path, cmd))
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), f"{path} {name}", ctx)

    walk(root, "lorastudio", None)
    return out


def test_every_command_option_and_argument_says_what_it_is():
    missing: list[str] = []
    commands = _commands()
    for path, cmd in commands:
        if not (getattr(cmd, "help", None) or getattr(cmd, "short_help", None)):
            missing.append(f"{path}: no help")
        for param in cmd.params:  # type: ignore[attr-defined]
            text = (getattr(param, "help", None) or "").strip()
            # a help that only states a default ("default: the family's") does not say what it is
            if not text or text.lower().startswith("default"):
                missing.append(f"{path} {'/'.join(param.opts)}: {text!r}")
    assert len(commands) > 30 and missing == []


def test_runs_list_marks_the_cli_runs():
    """README: `runs list` shows every run, the server's and `train`'s (marked cli)."""
    from typer.testing import CliRunner

    from lorastudio.jobs.store import RunStore
    from lorastudio.settings import get_settings

    store = RunStore.open(get_settings().db_path)
    try:
        store.create_run("servicerun01", "by-server", "flux", {"steps": 2}, "2026-12-04T16:00:00")
        store.create_run("clirun000001", "by-cli", "flux", {"steps": 2}, "2026-12-04T16:01:00", source="cli")
    finally:
        store.close()
    _register()
    out = CliRunner().invoke(app, ["runs", "list"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line.split() for line in out.output.splitlines()[1:]}
    assert rows["clirun000001"][2] == "cli" and rows["servicerun01"][2] == "service"


def test_the_datasets_description_names_every_entry_key():
    text = TrainConfig.model_fields["datasets"].description or ""
    assert [k for k in DatasetEntry.model_fields if k not in text] == []
