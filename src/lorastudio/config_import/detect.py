"""Which trainer wrote a config file, from its keys (no torch).

Each format has keys only it writes; the format whose keys the file holds is the answer when no
other format's are there too. Otherwise the file is refused naming the candidates (or every
format, when none fits): `--from` then says which it is. Never a guess.
"""

from __future__ import annotations

from typing import Any

FORMATS = ("ai-toolkit", "kohya", "simpletuner", "onetrainer")

_KEYS = {
    "kohya": {
        "network_module",
        "network_dim",
        "network_alpha",
        "network_args",
        "optimizer_type",
        "train_data_dir",
        "dataset_config",
        "max_train_epochs",
        "save_every_n_epochs",
        "save_every_n_steps",
        "save_model_as",
        "sample_every_n_steps",
        "dit",
        "train_batch_size",
        "output_name",
        "network_train_unet_only",
        "cache_latents",
        "sdpa",
        "xformers",
        "min_snr_gamma",
        "caption_extension",
        "shuffle_caption",
    },
    "simpletuner": {
        "model_family",
        "data_backend_config",
        "lora_type",
        "model_flavour",
        "validation_steps",
        "validation_prompt",
        "checkpointing_steps",
        "checkpoint_step_interval",
        "base_model_precision",
        "lycoris_config",
        "flow_schedule_shift",
        "validation_resolution",
    },
    "onetrainer": {
        "training_method",
        "base_model_name",
        "concept_file_name",
        "learning_rate_scheduler",
        "sample_after",
        "sample_after_unit",
        "output_model_destination",
        "train_dtype",
        "weight_dtype",
        "concepts",
        "offset_noise_weight",
        "lora_weight_dtype",
        "__version",
    },
}


def _keys(data: dict[str, Any]) -> set[str]:
    """The file's keys, SimpleTuner's "--name" spelling as "name", kohya's sections' keys too."""
    out = set()
    for key, value in data.items():
        out.add(str(key).removeprefix("--"))
        if isinstance(value, dict) and str(key).endswith("_arguments"):  # sd-scripts' sectioned TOML
            out |= {str(k) for k in value}
    return out


def candidates(data: Any) -> list[str]:
    """The formats the parsed document `data` may be, best first (empty: none)."""
    if not isinstance(data, dict):
        return []
    config = data.get("config")
    if isinstance(config, dict) and isinstance(config.get("process"), list):
        return ["ai-toolkit"]
    keys = _keys(data)
    scores = {name: len(keys & wanted) for name, wanted in _KEYS.items()}
    found = sorted((n for n, s in scores.items() if s), key=lambda n: -scores[n])
    if any(str(k).startswith("--") for k in data) and "simpletuner" in found:
        return ["simpletuner"]  # only SimpleTuner writes its arguments' dashes
    return found


def detect(data: Any) -> str | list[str]:
    """The one format `data` is, else the candidates (several, or none)."""
    found = candidates(data)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        first, second = found[0], found[1]
        keys = _keys(data)
        if len(keys & _KEYS[first]) >= 3 * max(1, len(keys & _KEYS[second])):
            return first  # one format's keys by far (SimpleTuner shares output_dir-like words)
    return found
