"""A CLI training config: a .json / .toml file read into a dict, `--set key=value` overrides, and
its path settings made independent of the current directory. Shared by `train`, `demo` and
`generate`, and by bench/e2e_run (the CLI's path at real size)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from lorastudio.cli.nested_set import nested_text_fields, set_nested, text_items
from lorastudio.cli.peer_configs import peer_config_problem
from lorastudio.config_import.reading import read_bytes
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.json_keys import DuplicateKeys, loads_unique
from lorastudio.user_paths import expand_user, missing_file
from lorastudio.utf8_text import utf8_text


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a .json or .toml config file into a dict. Raises ConfigError (missing file, a folder
    or named pipe, unsupported extension, not UTF-8, syntax error, a key given twice, not a
    table/object; another trainer's config file, naming it: cli/peer_configs.py). A UTF-8 byte-order mark (what Windows' Notepad writes first) is skipped.
    The file is opened once, without blocking, and read only when it is a regular file of at most
    config_import.reading.MAX_BYTES: a 2 GB (sparse) `config.json` was read whole into memory,
    and a pipe put in its place after the check blocked the command."""
    if not path.is_file():
        raise ConfigError([FieldProblem("config", missing_file(path))])
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        yaml = (
            " (a lorastudio run config; another trainer's YAML config is not read: `lorastudio config import"
            f" {path.name}` writes one from it)"
            if suffix in (".yaml", ".yml")
            else ""
        )
        raise ConfigError([FieldProblem("config", f"{path.name}: use a .json or .toml file{yaml}")])
    try:
        text = _read_text(path)
        if suffix == ".json":  # a key given twice is refused, as TOML refuses it (json keeps the last)
            data = loads_unique(text)
        else:
            data = tomllib.loads(text)
    except (
        ValueError,
        OSError,
        RecursionError,
    ) as err:  # JSON/TOMLDecodeError are ValueErrors; nesting too deep
        raise ConfigError([FieldProblem("config", f"cannot read {path}: {err}")]) from err
    if (peer := peer_config_problem(data)) is not None:  # kohya's, SimpleTuner's, OneTrainer's
        raise ConfigError([FieldProblem("config", f"{path.name}: {peer}")])
    if not isinstance(data, dict):
        raise ConfigError([FieldProblem("config", f"{path}: the top level must be an object of settings")])
    return data


def _read_text(path: Path) -> str:
    """The file's text without a leading UTF-8 byte-order mark. Raises ValueError naming the line
    and column of the first byte that is not UTF-8 (utf8_text), ConfigError (not a regular file,
    over the size cap, unreadable: config_import.reading.read_bytes)."""
    try:
        return utf8_text(read_bytes(path, "config", "a lorastudio config"))
    except ValueError as err:
        raise ValueError(f"{err} (save it as UTF-8)") from None


def apply_overrides(data: dict[str, Any], overrides: list[str], *, nested: bool = True) -> dict[str, Any]:
    """Apply `key=value` overrides; a value is parsed as JSON when it can be (numbers, true,
    null, lists), else taken as a string; a setting that takes only text (`text_settings`) keeps
    a number or true/false as the text typed (`trigger_word=123`, `output_name=2024`). A dotted
    key sets a value inside `data`'s tables and lists (`datasets.0.repeats=4`: cli/nested_set.py;
    with `nested` False it stays a flat key, as a resume's `datasets.N.path` is read). A key
    given twice: the last one wins (as every option given twice). Returns a new dict. Raises
    ConfigError listing every malformed override (JSON holding an object with a key given twice
    among them)."""
    out, problems = split_overrides(data, overrides, nested=nested)
    if problems:
        raise ConfigError(problems)
    return out


def split_overrides(
    data: dict[str, Any], overrides: list[str], *, nested: bool = True
) -> tuple[dict[str, Any], list[FieldProblem]]:
    """(`data` with the well-formed overrides applied, a problem for each malformed one), so
    that a caller can list those problems with the settings' own (every problem at once)."""
    out = dict(data)
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(FieldProblem("--set", f"{item!r} is not key=value"))
            continue
        try:
            value = loads_unique(raw)
        except DuplicateKeys as err:
            problems.append(FieldProblem(f"--set {key}", str(err)))
            continue
        except ValueError:
            value = raw
        head, dot, tail = key.partition(".")
        texts = nested_text_fields(head) if dot else text_settings()  # datasets.0.path: an entry's
        text = (tail.rpartition(".")[2] if dot else key) in texts
        text = text or bool(dot) and tail.isascii() and tail.isdigit() and text_items(head)  # control_dirs.0
        if isinstance(value, bool | int | float) and text:
            value = raw  # the shell gives text: `--set trigger_word=123` means the word "123"
        if dot and nested:
            if (problem := set_nested(out, key, value)) is not None:
                problems.append(problem)
            continue
        out[key] = value
    return out, problems


@cache
def text_settings() -> frozenset[str]:
    """The TrainConfig settings whose values are text only (a string, or null): for those a
    `--set` value that reads as a JSON number or boolean is the text the user typed, never a
    number the setting then refuses ("Input should be a valid string")."""
    from lorastudio.config import TrainConfig

    out = set()
    for name, schema in TrainConfig.model_json_schema()["properties"].items():
        types = {option.get("type") for option in schema.get("anyOf", [schema])}
        if "string" in types and types <= {"string", "null"}:
            out.add(name)
    return frozenset(out)


def localize_path(value: str, *, may_be_hub_id: bool) -> str:
    """A CLI path setting made independent of the current directory: "~..." is expanded, a
    relative path ("./x", "../x", "a/b") becomes absolute against the current directory; a bare
    name stays as it is (a dataset under datasets/, a model under models/). With
    `may_be_hub_id`, "owner/name" stays a hub id unless such a folder (or checkpoint file) exists here."""
    if value.startswith("~"):
        return str(expand_user(value).resolve())
    path = Path(value)
    if path.is_absolute() or ("/" not in value and not value.startswith(".")):
        return value
    if may_be_hub_id and not value.startswith(".") and not path.exists():
        return value
    return str(path.resolve())


def localize_paths(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its data_dir (each datasets entry's path), control_dirs, a validation_split
    folder, base_model, base_config and init_lora localized (localize_path): a config file's paths
    are taken relative to the directory the command runs in (init_lora's bare name stays a trained
    LoRA's name). control_dirs and validation_split, read "like data_dir", were left as typed:
    `~/controls` was looked up as a dataset named "~/controls" (RELIABILITY 2014)."""
    out = dict(data)
    for key, hub in (
        ("data_dir", False),
        ("base_model", True),
        ("base_config", True),
        ("init_lora", False),
        ("validation_split", False),
    ):
        if isinstance(out.get(key), str):
            out[key] = localize_path(out[key], may_be_hub_id=hub)
    if isinstance(out.get("control_dirs"), list):
        out["control_dirs"] = [
            localize_path(d, may_be_hub_id=False) if isinstance(d, str) else d for d in out["control_dirs"]
        ]
    if isinstance(out.get("datasets"), list):  # each entry's folder, like data_dir
        out["datasets"] = [
            {**e, "path": localize_path(e["path"], may_be_hub_id=False)}
            if isinstance(e, dict) and isinstance(e.get("path"), str)
            else e
            for e in out["datasets"]
        ]
    return out
