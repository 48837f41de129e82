"""The checks the config-import tests make of a written config (tests/unit/test_config_import*.py):
the strict config reads it as `lorastudio train FILE --check` does, and every leaf of the peer's
file is named by a report line."""

from __future__ import annotations

from pathlib import Path

from lorastudio.cli.config_file import load_config_file
from lorastudio.config import parse_train_config, resolve_train_config
from lorastudio.config_import.report import leaves

DATA = Path(__file__).resolve().parent / "data" / "peer_configs"


def strict(text: str, tmp_path: Path, suffix: str = ".toml") -> dict:
    """The written config read as `lorastudio train FILE --check` reads it, then parsed and
    resolved by the strict config (raises ConfigError on any problem)."""
    path = tmp_path / f"run{suffix}"
    path.write_text(text, encoding="utf-8")
    data = load_config_file(path)
    resolve_train_config(parse_train_config(data))
    return data


def every_leaf_reported(doc: object, lines: list, root: str = "") -> None:
    """Every leaf of the peer's `doc` (under `root`: a side file's) is named by one of `lines`."""
    named = [line.peer for line in lines]
    if root:  # a side file's leaves by its own lines ("lycoris_config" holds no "lycoris_config.json.algo")
        named = [n for n in named if n == root or n.startswith((root + ".", root + "["))]
    for leaf in leaves(doc, root):
        assert any(
            leaf == n
            or leaf.startswith((n + ".", n + "["))
            or n.startswith((leaf + ".", leaf + "[", leaf + " "))
            for n in named
        ), leaf
