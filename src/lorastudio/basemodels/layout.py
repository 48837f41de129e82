"""The file layout of a diffusers pipeline: which components model_index.json lists, which files
of a component are the weights a loader would use, what a folder is missing, and which files of
a hub repo training needs. Pure functions over names and folders (no torch, no network).

Weights: a component's loadable weights are its non-variant `*.safetensors` (with every shard its
`*.safetensors.index.json` names), else its non-variant `*.bin`; variants (`*.fp16.safetensors`)
and other formats (ckpt, flax, onnx, gguf, ...) are not what diffusers/transformers load by
default, so they are never counted as weights nor fetched.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorastudio.basemodels.jsonfile import read_json

MODEL_INDEX = "model_index.json"
LOADABLE_WEIGHTS = (".safetensors", ".bin")
OTHER_WEIGHTS = (".ckpt", ".pt", ".pth", ".msgpack", ".h5", ".onnx", ".onnx_data", ".pb", ".tflite", ".gguf")
# Formats made for inference runtimes: a folder holding only these cannot be trained.
INFERENCE_ONLY: dict[str, str] = {
    ".gguf": "GGUF",
    ".onnx": "ONNX",
    ".engine": "TensorRT",
    ".plan": "TensorRT",
    ".mlmodel": "Core ML",
    ".mlpackage": "Core ML",
}
_SHARD = re.compile(r"-\d{5}-of-\d{5}")
_NO_WEIGHTS = ("Tokenizer", "Scheduler", "Processor", "FeatureExtractor")


def listed_components(index: Mapping[str, Any]) -> dict[str, str]:
    """Components a model_index.json lists as present: name -> class name. Entries such as
    `"image_encoder": [null, null]` (optional parts left out) and `_private` keys are skipped."""
    found = {}
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, list) or len(value) != 2:
            continue
        if isinstance(value[0], str) and isinstance(value[1], str):
            found[name] = value[1]
    return found


def needs_weights(class_name: str) -> bool:
    """True for model components (weights + config.json); tokenizers, schedulers and
    processors hold only configuration/vocabulary files."""
    return not any(word in class_name for word in _NO_WEIGHTS)


def weight_suffix(name: str) -> str | None:
    """The weight-format suffix of a file name ('.safetensors', '.gguf', ...), or None."""
    lower = name.lower()
    for suffix in LOADABLE_WEIGHTS + OTHER_WEIGHTS + tuple(INFERENCE_ONLY):
        if lower.endswith(suffix):
            return suffix
    return None


def is_variant(name: str) -> bool:
    """True for variant weights such as `model.fp16.safetensors` or
    `diffusion_pytorch_model-00001-of-00002.fp16.safetensors` (a dot left in the stem)."""
    suffix = weight_suffix(name)
    stem = name[: -len(suffix)] if suffix else name
    return "." in _SHARD.sub("", stem)


def loadable_weights(names: Iterable[str]) -> tuple[list[str], str | None]:
    """The weight files a loader would use among one component folder's file names, and their
    suffix: non-variant .safetensors, else non-variant .bin. ([], None) when there are none."""
    names = sorted(names)
    for suffix in LOADABLE_WEIGHTS:
        chosen = [n for n in names if n.endswith(suffix) and not is_variant(n)]
        if chosen:
            return chosen, suffix
    return [], None


def inference_only_formats(names: Iterable[str]) -> list[str]:
    """Names of the inference-only formats (GGUF, ONNX, ...) among file names, sorted, unique."""
    return sorted({INFERENCE_ONLY[s] for n in names if (s := weight_suffix(n)) in INFERENCE_ONLY})


def _missing_shards(folder: Path, names: set[str], suffix: str) -> list[str]:
    """Shards named by the component's non-variant weight index that are not in `names`."""
    missing: list[str] = []
    for index_name in sorted(
        n for n in names if n.endswith(f"{suffix}.index.json") and not is_variant(n[:-11])
    ):
        try:
            weight_map = read_json(folder / index_name).get("weight_map", {})
        except (OSError, ValueError, AttributeError):
            missing.append(f"{folder.name}/{index_name} (unreadable)")
            continue
        shards = (
            {v for v in weight_map.values() if isinstance(v, str)} if isinstance(weight_map, dict) else set()
        )
        missing += [f"{folder.name}/{s}" for s in sorted(shards - names)]
    return missing


def component_missing(folder: Path, class_name: str) -> list[str]:
    """What component folder `folder` (of a `class_name` component) lacks for training: '' list
    when complete. Entries: 'vae/' (no folder), 'vae/config.json', 'transformer/*.safetensors
    (weights)', 'text_encoder/model-00002-of-00002.safetensors' (a shard)."""
    comp = folder.name
    if not folder.is_dir():
        return [f"{comp}/"]
    names = {p.name for p in folder.iterdir() if p.is_file()}  # follows links: a dangling one is absent
    if not needs_weights(class_name):
        wanted = "scheduler_config.json" if "Scheduler" in class_name else None
        if wanted and wanted not in names:
            return [f"{comp}/{wanted}"]
        return [] if names else [f"{comp}/ (empty)"]
    missing = [] if "config.json" in names else [f"{comp}/config.json"]
    weights, suffix = loadable_weights(names)
    if suffix is None:
        only = inference_only_formats(names)
        note = f"; only {', '.join(only)} found, an inference-only format" if only else ""
        return [*missing, f"{comp}/*.safetensors (weights{note})"]
    return missing + _missing_shards(folder, names, suffix)


def pipeline_missing(folder: Path, index: Mapping[str, Any]) -> list[str]:
    """Everything the pipeline folder lacks for training (see component_missing), in index order."""
    missing: list[str] = []
    for comp, class_name in listed_components(index).items():
        missing += component_missing(folder / comp, class_name)
    return missing


# Bounds of the size walk of one catalogue folder: a pipeline is `folder/component/file` (depth 2;
# a few more levels for tokenizer or hub-cache layouts); a folder that needs more is not a model.
SCAN_MAX_DEPTH = 4
SCAN_MAX_ENTRIES = 20_000
SCAN_MAX_SECONDS = 2.0


@dataclass(frozen=True)
class FolderSize:
    """Bytes of the files found under a folder; `complete` is False when the walk stopped at one
    of its bounds (depth, entries, time), so `bytes` is a lower bound."""

    bytes: int
    complete: bool


def folder_size(
    folder: Path,
    *,
    max_depth: int = SCAN_MAX_DEPTH,
    max_entries: int = SCAN_MAX_ENTRIES,
    max_seconds: float = SCAN_MAX_SECONDS,
) -> FolderSize:
    """Bytes of the files under `folder`, `max_depth` levels deep at most (file links followed:
    hub-cache snapshots are links; folder links are not entered, so no loop), stopping after
    `max_entries` directory entries or `max_seconds`. Never raises for unreadable entries."""
    deadline = time.monotonic() + max_seconds
    total, seen, complete = 0, 0, True
    pending = [(Path(folder), 0)]
    while pending:
        current, depth = pending.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    seen += 1
                    if seen > max_entries or time.monotonic() > deadline:
                        return FolderSize(total, False)
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if depth + 1 < max_depth:
                                pending.append((Path(entry.path), depth + 1))
                            else:
                                complete = False
                        elif entry.is_file():
                            total += entry.stat().st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return FolderSize(total, complete)


@dataclass(frozen=True)
class Selection:
    """Files of a hub repo that training needs. `files`: repo paths to fetch; `skipped`: the repo
    files left out; `problems`: components for which the repo has no loadable files (a fetch
    must refuse the repo when this is not empty)."""

    files: list[str]
    skipped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def select_training_files(index: Mapping[str, Any], repo_files: Iterable[str]) -> Selection:
    """Pick the files training needs from a hub repo's file list, given its model_index.json.

    Keeps model_index.json and, per listed component, its non-weight files (configs, tokenizer
    vocabularies, templates) plus its loadable weights (see `loadable_weights`: safetensors when
    present, so *.bin twins are skipped; variants, ckpt, flax, onnx and gguf never). Skips
    everything else: single-file checkpoints at the root, READMEs, other folders. Files nested
    deeper than `component/file` are skipped too (loaders never read them).
    """
    all_files = sorted(set(repo_files))
    by_folder: dict[str, list[str]] = {}
    for path in all_files:
        head, _, rest = path.partition("/")
        if rest and "/" not in rest:
            by_folder.setdefault(head, []).append(rest)
    chosen = [MODEL_INDEX] if MODEL_INDEX in all_files else []
    problems = []
    for comp, class_name in listed_components(index).items():
        names = by_folder.get(comp, [])
        if not names:
            problems.append(f"{comp}/ (not in the repo)")
            continue
        weights, _ = loadable_weights(names) if needs_weights(class_name) else ([], None)
        if needs_weights(class_name) and not weights:
            only = inference_only_formats(names)
            note = f"; only {', '.join(only)} found, an inference-only format" if only else ""
            problems.append(f"{comp}/*.safetensors (weights{note})")
        keep = set(weights) | {n for n in names if weight_suffix(n) is None}
        chosen += [f"{comp}/{n}" for n in sorted(keep)]
    kept = set(chosen)
    return Selection(chosen, [p for p in all_files if p not in kept], problems)
