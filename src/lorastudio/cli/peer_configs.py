"""Another trainer's config file given where a lorastudio run config goes (`lorastudio train FILE`).

kohya sd-scripts' dataset config (`[general]`, `[[datasets]]` with `[[datasets.subsets]]`) or
training config, SimpleTuner's multidatabackend.json and OneTrainer's concepts file were answered
with schema noise ("family: Field required", "datasets.0.subsets: unknown setting", "the top level
must be an object of settings"), naming neither the file's kind nor the way to train its data
(RELIABILITY 1004). `peer_config_problem` names the kind and what to write instead; for a kohya
dataset config and a OneTrainer concepts file it also writes the `[[datasets]]` entries of their
folders (repeats, regularisation, caption words), which the user completes with family and
base_model. Nothing in such a file is read as a run's settings.
"""

from __future__ import annotations

import json
import math
from typing import Any

_ENTRY_KEYS = {  # kohya subset key -> lorastudio entry key
    "num_repeats": "repeats",
    "class_tokens": "default_caption",
    "keep_tokens": "keep_tokens",
    "shuffle_caption": "shuffle_tags",
    "caption_dropout_rate": "caption_dropout",
}
_MOST_ENTRIES = 20


def _list(value: object) -> list:
    """`value` when it is a list, else none (a hand-edited file's `datasets = 5`)."""
    return value if isinstance(value, list) else []


def _finite(value: object) -> bool:
    """Whether `value` is a finite number (JSON's Infinity and NaN read as floats)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _toml_value(value: object) -> str:
    """`value` as a TOML value (strings JSON-quoted: a TOML basic string takes JSON's escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if _finite(value):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def _entries(rows: list[dict[str, object]]) -> str:
    """`[[datasets]]` TOML of `rows` (key -> value, in order), the first _MOST_ENTRIES."""
    out = []
    for row in rows[:_MOST_ENTRIES]:
        out.append("[[datasets]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in row.items()))
    if len(rows) > _MOST_ENTRIES:
        out.append(f"# and {len(rows) - _MOST_ENTRIES} more\n")
    return "\n".join(out)


def _kohya_dataset(data: dict[str, Any]) -> str:
    general = data.get("general") if isinstance(data.get("general"), dict) else {}
    rows: list[dict[str, object]] = []
    extensions = set()
    for dataset in _list(data.get("datasets")):
        if not isinstance(dataset, dict):
            continue
        # musubi-tuner's [[datasets]] hold their image_directory themselves, no subsets (RELIABILITY 1301)
        subsets = _list(dataset.get("subsets")) if "subsets" in dataset else [dataset]
        for subset in subsets:
            if not isinstance(subset, dict):
                continue
            merged = {**general, **{k: v for k, v in dataset.items() if k != "subsets"}, **subset}
            where = merged.get("image_dir", merged.get("image_directory"))
            if not isinstance(where, str):
                continue  # a fine-tuning subset (metadata_file): no folder to give
            row: dict[str, object] = {"path": where}
            for theirs, ours in _ENTRY_KEYS.items():
                value = merged.get(theirs)
                if value is not None and not (theirs == "num_repeats" and value == 1):
                    row[ours] = value
            if merged.get("is_reg") is True:
                row["regularisation"] = True
            rows.append(row)
            extensions.add(str(merged.get("caption_extension", ".caption")))
    other = sorted(extensions - {".txt"})
    captions = (
        f" Its captions are {', '.join(other)} files: lorastudio reads <image>.txt (rename them), or set"
        " kohya_folders = true on their N_words parent, which reads .txt and .caption."
        if other
        else ""
    )
    found = (
        f" Its subsets as this config's entries (add family, base_model and your training settings):\n{_entries(rows)}"
        if rows
        else ""
    )
    return (
        "a kohya sd-scripts dataset config ([general], [[datasets.subsets]]), not a lorastudio run config: a run "
        "config names family and base_model, and each image folder as a [[datasets]] entry (path, repeats, "
        "regularisation, default_caption; resolution, batch size and bucketing are the run's settings)."
        + captions
        + found
    )


def _onetrainer_concepts(concepts: list[dict[str, Any]]) -> str:
    rows: list[dict[str, object]] = []
    for concept in concepts:
        if concept.get("enabled") is False or not isinstance(concept.get("path"), str):
            continue
        row: dict[str, object] = {"path": concept["path"]}
        repeats = concept.get("balancing", concept.get("repeats"))
        by_repeats = concept.get("balancing_strategy", "REPEATS") == "REPEATS"
        if by_repeats and _finite(repeats) and int(repeats) == repeats and repeats > 1:
            row["repeats"] = int(repeats)
        if _finite(concept.get("loss_weight")) and concept["loss_weight"] != 1:
            row["loss_weight"] = concept["loss_weight"]
        rows.append(row)
    found = f" Its enabled concepts as entries:\n{_entries(rows)}" if rows else ""
    return (
        "a OneTrainer concepts file, not a lorastudio run config: a run config names family and base_model, and "
        "each concept folder as a [[datasets]] entry (path, repeats; captions as <image>.txt beside each image; "
        "sub-folders are not read)." + found
    )


def _job_config(data: dict[str, Any]) -> str | None:
    """What an ai-toolkit job or a SimpleTuner config.json is, else None. Both were answered with
    schema noise ("job: unknown setting", "--model_family: unknown setting"), and a SimpleTuner
    config without dashes holding pretrained_model_name_or_path was named a kohya training config,
    with kohya's advice (RELIABILITY 1300). Only their own keys are looked at (never ones a
    lorastudio config may hold: output_name, seed)."""
    config = data.get("config")
    if isinstance(config, dict) and isinstance(config.get("process"), list):
        return (
            "an ai-toolkit job config (config.process), not a lorastudio run config: `lorastudio config import"
            " FILE` writes one from it, with a report of every setting"
        )
    keys = {str(k).removeprefix("--") for k in data}
    if any(str(k).startswith("--") for k in data) or keys & {
        "model_family",
        "data_backend_config",
        "model_flavour",
    }:
        return (
            "SimpleTuner's config.json, not a lorastudio run config: `lorastudio config import FILE` writes one"
            " from it (with its data_backend_config's local folders as [[datasets]] entries), with a report of"
            " every setting"
        )
    return None


def _kohya_keys(data: dict[str, Any]) -> set[str]:
    """The argument names sd-scripts reads from a `--config_file`: the top level's and those of its
    sectioned form's `[*_arguments]` tables (`[model_arguments]`, `[training_arguments]` ...), which
    sd-scripts flattens and config_import.detect reads alike. A sectioned file was answered
    "model_arguments: unknown setting" with "family: Field required" (RELIABILITY 2120)."""
    keys = {str(k) for k in data}
    for key, value in data.items():
        if isinstance(value, dict) and str(key).endswith("_arguments"):
            keys |= {str(k) for k in value}
    return keys


def peer_config_problem(data: object) -> str | None:
    """What the parsed config `data` is when it is another trainer's file, and how to train its
    data here; None when it is not one (the schema then says what is wrong)."""
    if isinstance(data, dict):
        datasets = data.get("datasets")
        subsets = isinstance(datasets, list) and any(
            isinstance(d, dict) and ("subsets" in d or "image_directory" in d or "image_dir" in d)
            for d in datasets
        )
        if subsets or isinstance(data.get("general"), dict):
            return _kohya_dataset(data)
        if (other := _job_config(data)) is not None:
            return other
        if {"pretrained_model_name_or_path", "network_module"} & _kohya_keys(data):
            return (
                "a kohya sd-scripts training config, not a lorastudio run config: write one with family, "
                "base_model (its pretrained_model_name_or_path), data_dir with kohya_folders = true (its "
                "train_data_dir), lora_rank / lora_alpha (network_dim / network_alpha), learning_rate, steps "
                "(max_train_steps): `lorastudio config import FILE` writes it from this file, with a report of"
                " every setting"
            )
        if "concept_file_name" in data or "training_method" in data:
            return (
                "a OneTrainer training config, not a lorastudio run config: write one with family, base_model and "
                "each concept folder as a [[datasets]] entry (path, repeats); `lorastudio config import FILE`"
                " writes one from this file"
            )
        return None
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        if any(
            "instance_data_dir" in d or d.get("type") in ("local", "aws", "csv", "huggingface") for d in data
        ):
            folders = [d["instance_data_dir"] for d in data if isinstance(d.get("instance_data_dir"), str)]
            rows: list[dict[str, object]] = [{"path": f} for f in folders]
            found = f" Its image folders as entries:\n{_entries(rows)}" if rows else ""
            return (
                "SimpleTuner's multidatabackend.json, not a lorastudio run config: a run config names family and "
                "base_model, and each image folder as a [[datasets]] entry (path, repeats; captions as "
                "<image>.txt, SimpleTuner's caption_strategy textfile)." + found
            )
        if any("path" in d and ("balancing" in d or "text" in d or "image" in d) for d in data):
            return _onetrainer_concepts(data)
    return None
