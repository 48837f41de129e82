"""The weight files a training run reads, in the order the engine loads them: what the page-cache
prefetch (jobs/prefetch.py) warms. Lookups on disk only: no torch, never the network.

Order (training/loop.py's phases): phase 1 loads the text encoders (every weight component of
model_index.json but the VAE and the denoiser, in the index's order: the text pipeline is the
family's pipeline without those two), phase 2 the VAE, phase 3 the denoiser. A component's files
are the ones its loader uses (basemodels/layout.loadable_weights: the non-variant .safetensors,
every shard, else the .bin). A single-file base is read with the first component it holds (an
SDXL file: U-Net, VAE and both text encoders, read with the text encoders; a FLUX.1 / Chroma
file: the transformer, read as the denoiser); what it lacks comes from its base config.

Where the files are: where basemodels/resolve.resolve_base (THE resolution) finds the base: an
absolute folder or file, a name under models/, lorastudio's fetched copy of a hub id (no revision
asked), else the hub id's snapshot in the hub cache at the run's revision; a single file's base
config (given, else its layout's hub id) the same way. Looked up without resolve_base's vetting,
which reads the family table and so imports torch: the prefetch would wait on that import before
its first read. Anything that does not resolve has no files here (the run's own checks say why);
a hub id that is not on disk neither (the loader downloads it: nothing to warm). The denoiser is
the pipeline's `unet` where it has one, else its `transformer` (every family's spec.denoiser).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lorastudio.basemodels.catalogue import fetched_folder
from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id
from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import MODEL_INDEX, listed_components, loadable_weights, needs_weights
from lorastudio.basemodels.single_file import read_file_facts
from lorastudio.settings import Settings
from lorastudio.user_paths import expand_user, resolved

# The parts of a run that load weights, in the order the engine loads them; the names are those of
# training/events.ModelLoadStarted.component.
LOAD_ORDER = ("text_encoders", "vae", "denoiser")
DENOISERS = ("unet", "transformer")  # a pipeline's denoiser component: the first of these it has


@dataclass(frozen=True)
class WeightFile:
    """One file a run's loader reads: its path (links followed by whoever opens it), its size in
    bytes, and the part of the run that loads it (one of LOAD_ORDER)."""

    path: Path
    size: int
    part: str


def run_weight_files(
    base_model: str,
    settings: Settings,
    revision: str | None = None,
    base_config: str | None = None,
) -> list[WeightFile]:
    """The weight files a run on `base_model` reads, in load order (module docstring); [] when the
    base (or a single file's base config) is not on disk. Raises OSError when a folder or file
    found cannot be listed or read, LorastudioError for a file that is not a checkpoint lorastudio
    recognises."""
    found = _local(base_model, settings, revision)
    if found is None:
        return []
    if found.is_dir():
        return _sorted(_folder_files(found, skip=()))
    layout = read_file_facts(found).layout
    config = _local(base_config or layout.default_config, settings, revision)
    rest = _folder_files(config, skip=layout.components) if config is not None and config.is_dir() else []
    denoiser = _denoiser(layout.components)
    first = min(_part(c, denoiser) for c in layout.components)  # the part that first reads the file
    return _sorted([WeightFile(found, found.stat().st_size, LOAD_ORDER[first]), *rest])


def _local(base: str, settings: Settings, revision: str | None) -> Path | None:
    """Where `base` is on disk (resolve_base's order, module docstring), or None."""
    given = expand_user(base)
    if not given.is_absolute() and ".." not in given.parts and not base.startswith((".", "~")):
        named = settings.models_dir / given
        if os.path.lexists(named):
            return resolved(named)
    if given.is_absolute():
        return resolved(given) if given.exists() else None
    if not is_hub_id(base):
        return None
    fetched = fetched_folder(settings, base, None) if revision is None else None
    return fetched or cached_snapshot(base, revision)


def _denoiser(components: Iterable[str]) -> str:
    """The denoiser among a pipeline's (or a single file's) components (module docstring)."""
    present = set(components)
    return next((name for name in DENOISERS if name in present), DENOISERS[-1])


def _part(component: str, denoiser: str) -> int:
    """Index in LOAD_ORDER of the part that loads pipeline component `component`."""
    if component == denoiser:
        return LOAD_ORDER.index("denoiser")
    return LOAD_ORDER.index("vae") if component == "vae" else LOAD_ORDER.index("text_encoders")


def _folder_files(folder: Path, skip: tuple[str, ...]) -> list[WeightFile]:
    """The weight files of pipeline folder `folder`'s components (those in `skip` left out), in
    model_index.json order; [] when it has no readable model_index.json."""
    try:
        index = read_json(folder / MODEL_INDEX)
    except (OSError, ValueError):
        return []
    if not isinstance(index, dict):
        return []
    components = listed_components(index)
    denoiser = _denoiser(components)
    out: list[WeightFile] = []
    for component, class_name in components.items():
        if component in skip or not needs_weights(class_name) or not (folder / component).is_dir():
            continue
        names = [entry.name for entry in os.scandir(folder / component) if entry.is_file()]
        for name in loadable_weights(names)[0]:
            path = folder / component / name
            out.append(WeightFile(path, path.stat().st_size, LOAD_ORDER[_part(component, denoiser)]))
    return out


def _sorted(files: list[WeightFile]) -> list[WeightFile]:
    """`files` in load order (stable within a part: index order, then each component's names)."""
    return sorted(files, key=lambda f: LOAD_ORDER.index(f.part))
