"""`lorastudio config import`: another trainer's config file as a lorastudio run config (no torch).

ai-toolkit's YAML job, kohya sd-scripts' / musubi-tuner's train_network arguments (TOML or JSON,
with their dataset_config TOML), SimpleTuner's config.json (with its multidatabackend.json) and
OneTrainer's exported JSON are read (reading.py: size cap, UTF-8, YAML without alias bombs), their
format detected from their keys (detect.py) unless named, mapped by one module per trainer into
our settings and a report line per peer setting (report.py), and the result checked by the
strict config, the refused settings taken out and named (settle.py). Every peer setting is
reported: carried, changed in meaning (how), or not carried (why); a key this importer does not
know is reported as not read, never dropped without a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio.config_import.detect import FORMATS, detect
from lorastudio.config_import.report import Draft, Line
from lorastudio.errors import ConfigError, FieldProblem

__all__ = ["FORMATS", "Imported", "import_config", "import_upload"]


@dataclass(frozen=True)
class Imported:
    """An imported config: the peer format `kind`, our `settings` (they pass the strict config),
    the report `lines` (one or more per peer setting) and `text`, the .toml or .json file."""

    kind: str
    settings: dict[str, Any]
    lines: list[Line]
    text: str


def _builder(kind: str) -> Any:
    """The mapping function of the format `kind` (one module per trainer)."""
    from lorastudio.config_import import aitoolkit, kohya, onetrainer, simpletuner

    return {"ai-toolkit": aitoolkit.build, "kohya": kohya.build, "simpletuner": simpletuner.build,
            "onetrainer": onetrainer.build}[kind]  # fmt: skip


def import_config(
    path: Path,
    source: str | None = None,
    family: str | None = None,
    toml: bool = True,
    base: str | None = None,
) -> Imported:
    """Read the peer config `path` (`source`: its format, one of FORMATS; None: detected) and
    return it as a lorastudio run config (`toml`: the text as TOML, else JSON), `family` and
    `base` replacing the family and base model the file names. Files it names (kohya's
    dataset_config, SimpleTuner's data_backend_config) are read, and relative paths taken against
    its folder. Raises ConfigError naming the file (and key): an unreadable or hostile file, a
    format not detected (the candidates named), a fault of the file, a family not named, a
    setting the strict config needs and the file lacks."""
    from lorastudio.config_import.reading import read_document

    return _import(Draft(path, ""), read_document(path), source, family, toml, base)


def import_upload(
    name: str, raw: bytes, source: str | None = None, family: str | None = None, base: str | None = None
) -> Imported:
    """`import_config` of a file sent to the server (the web UI's "Import a config"): `name` its
    name (its suffix picks the parser), `raw` its bytes. Nothing on the server's disk is read for
    it: the files it names are not read and its relative paths not carried (each line says so);
    its image folders are optional (the form chooses the dataset)."""
    from lorastudio.config_import.reading import parse_document

    return _import(Draft(Path(Path(name).name or "config"), "", local=False), parse_document(name, raw), source,
                   family, True, base)  # fmt: skip


def _import(
    draft: Draft, data: Any, source: str | None, family: str | None, toml: bool, base: str | None
) -> Imported:
    """Map the parsed `data` into `draft` (its format detected unless `source` names it), check it by the strict config and render it; see import_config."""
    from lorastudio.config_import.settle import render, settle

    name = draft.file.name
    if source is None:
        found = detect(data)
        if isinstance(found, list):
            named = ", ".join(found or FORMATS)
            why = "could be" if len(found) > 1 else "is none of the formats read here; it may be one of"
            raise ConfigError(
                [FieldProblem("config", f"{name} {why} {named}: say which with --from (the API's trainer)")]
                if found or isinstance(data, dict)
                else [FieldProblem("config", f"{name}: its top level is not a table of settings")]
            )
        source = found
    elif source not in FORMATS:
        raise ConfigError([FieldProblem("--from", f"{source!r}: one of {', '.join(FORMATS)}")])
    if not isinstance(data, dict):
        raise ConfigError([FieldProblem("config", f"{name}: its top level is not a table of settings")])
    if source == "ai-toolkit" and not _is_job(data):
        raise ConfigError(
            [FieldProblem("config", f"{name}: not an ai-toolkit job (config.process is missing)")]
        )
    draft.kind = source
    _builder(source)(draft, data, family)
    if base is not None:
        draft.settings.pop("base_model", None)
        draft.set("--base-model", "base_model", base)
    _single_file_base(draft)
    settle(draft, toml, need_data=draft.local)
    return Imported(source, draft.settings, draft.report(), render(draft, toml))


def _single_file_base(draft: Draft) -> None:
    """Refuse a base model that is one weights file of a family whose single files lorastudio does
    not read (basemodels/single_file.LAYOUTS: SDXL, FLUX.1, Chroma): musubi-tuner's DiT file of
    Qwen-Image, say, which `train --check` would refuse; --base-model then names its diffusers
    folder or hub id. Raises ConfigError naming the file and key."""
    from lorastudio.basemodels.single_file import LAYOUTS
    from lorastudio.config_import.common import WEIGHT_FILES

    value, family = draft.settings.get("base_model"), draft.settings.get("family")
    readable = sorted({row.family for row in LAYOUTS})
    from lorastudio import families

    known = {f.spec.name for f in families.all_families()}
    if draft.problems or family not in known or family in readable:
        return  # the file's own faults, an unknown family (settle says them), or one that reads single files
    if not isinstance(value, str) or not value.lower().endswith(WEIGHT_FILES):
        return
    peer = next((line.peer for line in draft.lines if line.ours == "base_model"), "base_model")
    where = peer if peer.startswith("--") else f"{draft.file.name}: {peer}"
    raise ConfigError([FieldProblem(where, f"{value}: lorastudio reads a single-file base for {', '.join(readable)} only;"
                                    f" pass --base-model with the {family} model's diffusers folder or hub id")])  # fmt: skip


def _is_job(data: dict[str, Any]) -> bool:
    """Whether `data` is an ai-toolkit job (a config.process list)."""
    config = data.get("config")
    return isinstance(config, dict) and isinstance(config.get("process"), list)
