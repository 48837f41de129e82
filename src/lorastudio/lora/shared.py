"""What leaves this machine names no local folder: the shared copies of a run's settings.

A LoRA file's header already names its base model by its last part (metadata.model_name, fix
105). Two other things are made to be shared and carried the trainer's own paths in full (the
user's home, the folders of the training images, where the studio keeps its runs):

- the sidecar a hub push uploads beside the LoRA (`<name>.json`, lora/hub_push.py): the base
  model's path, each dataset folder (`config.data_dir`, `config.datasets.N.path`,
  `dataset.path`, `dataset.entries.N.path` / `label`), control folders, a single file's
  base_config, an assistant LoRA's path;
- a generated PNG's text chunks (the gallery's, jobs/generation_worker.png_text, and
  `lorastudio generate`'s): the base model as the request or the command resolved it and each
  LoRA's file (`--lora NAME` resolved to `<home>/outputs/NAME/NAME.safetensors`), the controls.

`shared_copy` names each such path by its last part, as sd-scripts' `ss_sd_model_name` and our
header do (a hub id, a folder name under models/ or datasets/ and a plain name stay as they
are). Only values under the keys in PATH_KEYS change, so a prompt that starts with "/" is
kept. The local records (the sidecar in the run folder, the gallery's `.json` sidecar,
GET /api/gallery) keep the paths: they are what "generate again" and a resume read. No torch.
"""

from __future__ import annotations

from typing import Any

from lorastudio.lora.metadata import model_name

# keys whose string (or list of strings) value may be a local path, wherever they are nested
PATH_KEYS = frozenset(
    {
        "base_model",
        "base_config",
        "data_dir",
        "path",
        "label",  # a dataset entry's label: its folder as the config named it
        "control_dirs",
        "controls",
        "assistant_lora",
        "file",  # a `lorastudio generate` PNG's LoRA file
    }
)


def shared_copy(value: Any) -> Any:
    """A copy of JSON value `value` in which every string under a PATH_KEYS key (at any depth,
    or each string of a list there) is named by model_name: a local path by its last part."""
    if isinstance(value, dict):
        return {k: _shared_path(v) if k in PATH_KEYS else shared_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shared_copy(v) for v in value]
    return value


def _shared_path(value: Any) -> Any:
    if isinstance(value, str):
        return model_name(value)
    if isinstance(value, list):
        return [model_name(v) if isinstance(v, str) else shared_copy(v) for v in value]
    return shared_copy(value)  # an object (a sample prompt's controls never are): walk it
