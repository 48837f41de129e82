"""Captioning models in the catalogue: which folders and hub repos are captioners, the known ones
(their hub ids, sizes and licences), and which files of a captioner repo a fetch takes.

A captioner is a transformers vision-language model folder (config.json + weights + processor
files, no model_index.json) of a natively supported type: Qwen2.5-VL (`qwen2_5_vl`), Qwen2-VL
(`qwen2_vl`) or Florence-2 (`florence2` with the native `florence_vision` tower). A config that
maps to code in the repo (`auto_map`) is refused: lorastudio never runs remote code.

The catalogue lists each KNOWN_CAPTIONERS row as kind "captioner": fetched (models/owner--name,
by `lorastudio models fetch REPO`, the same fetch path as base models) or not yet (source
"catalogue", with the command that fetches it). Its catalogue id is the folder a fetch makes
(`owner--name`), so `datasets caption --model owner--name` works once it is fetched.
Pure functions over names and files (no torch, no network).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import INFERENCE_ONLY, OTHER_WEIGHTS
from lorastudio.errors import ModelSourceError

CaptionerKind = Literal["qwen2_5_vl", "qwen2_vl", "florence2"]
CAPTIONER_TYPES: tuple[str, ...] = ("qwen2_5_vl", "qwen2_vl", "florence2")
CONFIG = "config.json"
# What a captioner fetch takes: configs, processor / tokenizer files, chat templates and the
# safetensors weights (with their shard index). Other weight formats (.bin twins, ONNX, GGUF,
# flax) and code files (never run: no remote code) are left on the hub.
_FETCHED_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja", ".tiktoken")


@dataclass(frozen=True)
class KnownCaptioner:
    """A captioning model the catalogue offers. params: parameters (the model card's count);
    size_bytes: about what a fetch downloads (the weights as stored: Florence-2 fp32, Qwen bf16);
    licence: the repo's licence (its model card); model_type: config.json's."""

    repo_id: str
    title: str
    model_type: CaptionerKind
    params: int
    size_bytes: int
    licence: str
    note: str = ""

    @property
    def model_id(self) -> str:
        """The catalogue id: the models/ folder `lorastudio models fetch` makes for it."""
        return self.repo_id.replace("/", "--")


KNOWN_CAPTIONERS: tuple[KnownCaptioner, ...] = (
    KnownCaptioner(
        "florence-community/Florence-2-base", "Florence-2 base", "florence2", 230_000_000,
        930_000_000, "MIT", "fast, short captions; prompts are task tokens such as <DETAILED_CAPTION>",
    ),
    KnownCaptioner(
        "florence-community/Florence-2-large", "Florence-2 large", "florence2", 770_000_000,
        3_100_000_000, "MIT", "task tokens like base; better detail",
    ),
    KnownCaptioner(
        "Qwen/Qwen2.5-VL-3B-Instruct", "Qwen2.5-VL 3B Instruct", "qwen2_5_vl", 3_750_000_000,
        7_500_000_000, "Qwen Research License (non-commercial)", "free-text prompts; the default",
    ),
    KnownCaptioner(
        "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL 7B Instruct", "qwen2_5_vl", 8_290_000_000,
        16_600_000_000, "Apache-2.0", "free-text prompts; the most detailed",
    ),
)  # fmt: skip
_BY_REPO = {row.repo_id.lower(): row for row in KNOWN_CAPTIONERS}
_BY_ID = {row.model_id.lower(): row for row in KNOWN_CAPTIONERS}


def known_captioner(name: str | None) -> KnownCaptioner | None:
    """The row of a hub id or catalogue id (case-insensitive), or None."""
    if not name:
        return None
    return _BY_REPO.get(name.lower()) or _BY_ID.get(name.lower())


def captioner_kind(config: Mapping[str, Any], where: str) -> CaptionerKind:
    """The captioner kind of a parsed config.json. Raises ModelSourceError naming `where` and
    the reason: remote code, an unsupported model type, a Florence-2 of the remote-code layout."""
    model_type = config.get("model_type")
    if config.get("auto_map"):
        raise ModelSourceError(
            f"{where}: its config.json maps to code in the repo (auto_map), which needs "
            "trust_remote_code; lorastudio does not run remote code. Use a natively supported "
            "checkpoint (Qwen2.5-VL, or a converted Florence-2 such as florence-community/Florence-2-base)"
        )
    if model_type not in CAPTIONER_TYPES:
        raise ModelSourceError(
            f"{where}: model type {model_type!r} is not a supported captioner "
            f"(supported: {', '.join(CAPTIONER_TYPES)})"
        )
    if model_type == "florence2":
        vision = config.get("vision_config") or {}
        if vision.get("model_type") not in (None, "florence_vision"):
            raise ModelSourceError(
                f"{where}: a Florence-2 of the remote-code layout (vision tower "
                f"{vision.get('model_type')!r}); use a converted checkpoint (florence-community/Florence-2-*)"
            )
    return model_type  # type: ignore[no-any-return]


def read_config(path: Path, where: str) -> dict[str, Any]:
    """The parsed config.json at `path`. Raises ModelSourceError naming `where`."""
    try:
        config = read_json(path)
    except FileNotFoundError:
        raise ModelSourceError(f"{where}: no {CONFIG} (not a transformers model folder)") from None
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"{where}: {CONFIG} cannot be read: {err}") from None
    if not isinstance(config, dict):
        raise ModelSourceError(f"{where}: {CONFIG} is not a JSON object")
    return config


def folder_captioner(folder: Path) -> CaptionerKind | None:
    """The captioner kind of `folder` when it is a supported captioner folder (config.json of a
    supported type, no model_index.json), else None. Never raises."""
    if not (folder / CONFIG).is_file() or (folder / "model_index.json").exists():
        return None
    try:
        return captioner_kind(read_config(folder / CONFIG, str(folder)), str(folder))
    except ModelSourceError:
        return None


def captioner_problems(folder: Path) -> list[str]:
    """What a captioner folder lacks to load: its config.json, safetensors weights (every shard
    its index names) and a processor config. [] when complete."""
    problems = [] if (folder / CONFIG).is_file() else [CONFIG]
    problems += weight_problems(folder)
    if not any((folder / n).is_file() for n in ("preprocessor_config.json", "processor_config.json")):
        problems.append("preprocessor_config.json")
    return problems


def weight_problems(folder: Path) -> list[str]:
    """The safetensors weights a captioner folder lacks (every shard its index names, or any
    *.safetensors without an index). [] when its weights are all there."""
    problems: list[str] = []
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = read_json(index).get("weight_map", {})
            shards = {v for v in weight_map.values() if isinstance(v, str)}
        except (OSError, ValueError, AttributeError):
            shards = {"(unreadable model.safetensors.index.json)"}
        problems += sorted(s for s in shards if not (folder / s).is_file())
    elif not any(folder.glob("*.safetensors")):
        problems.append("*.safetensors weights")
    return problems


def select_captioner_files(files: Mapping[str, int]) -> tuple[list[str], list[str]]:
    """(files a captioner fetch takes, files it leaves) of a repo listing {path: bytes}: the
    configs, processor and tokenizer files and safetensors weights (see _FETCHED_SUFFIXES);
    other weight formats, code, docs and images are left."""
    taken, left = [], []
    for path in sorted(files):
        name = path.lower()
        other = name.endswith(OTHER_WEIGHTS + tuple(INFERENCE_ONLY)) or "/onnx/" in f"/{name}"
        if name.endswith(_FETCHED_SUFFIXES) and not other and not name.startswith("."):
            taken.append(path)
        else:
            left.append(path)
    return taken, left
