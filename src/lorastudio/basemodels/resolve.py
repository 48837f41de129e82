"""Where a hub id's files are on disk, vetted the same way as a local folder.

A hub id given as a base model is checked against what is on disk before anything is loaded:
lorastudio's own fetched copy (models/owner--name, used instead of the hub when no revision is
asked), else the hub cache; offline (HF_HUB_OFFLINE) nothing else exists, so a hub id that is not
on disk is refused with a message that says so.
"""

from __future__ import annotations

import os
from pathlib import Path

from lorastudio.basemodels.catalogue import fetched_folder
from lorastudio.basemodels.hubcache import cached_snapshot, hub_cache_dir, hub_offline, is_hub_id
from lorastudio.basemodels.vetting import inspect_folder, vet_pipeline_folder
from lorastudio.errors import ModelSourceError
from lorastudio.settings import Settings


def resolve_hub_id(
    settings: Settings, repo_id: str, revision: str | None, family: str
) -> tuple[str, Path | None]:
    """(source to load from, local folder or None) for hub id `repo_id` trained as `family`.

    - lorastudio fetched it (no revision asked): its models/ folder, vetted;
    - it is in the hub cache: the hub id (loaders read the cache), after vetting the cached
      snapshot (when complete; online, a partial snapshot is only checked for its family, the
      loader downloads the rest);
    - otherwise the hub id as is (online: the loaders download it).
    Raises ModelSourceError: wrong family, not trainable, or offline and not (fully) on disk.
    """
    if revision is None:
        folder = fetched_folder(settings, repo_id, None)
        if folder is not None:
            vet_pipeline_folder(folder, family)
            return str(folder), folder
    snapshot = cached_snapshot(repo_id, revision)
    offline = hub_offline()
    if snapshot is not None:
        rec = inspect_folder(snapshot)
        wrong_pipeline = rec.pipeline_class is not None and rec.family != family
        if offline or rec.complete or wrong_pipeline:
            vet_pipeline_folder(snapshot, family)  # raises unless complete and of this family
        return repo_id, None
    if offline:
        at = f" at revision {revision!r}" if revision else ""
        raise ModelSourceError(
            f"offline mode (HF_HUB_OFFLINE=1): {repo_id}{at} is not on disk (not in {settings.models_dir} "
            f"nor the hub cache {hub_cache_dir()}); fetch it first (`lorastudio models fetch {repo_id}`) "
            "with the hub reachable, or unset HF_HUB_OFFLINE"
        )
    return repo_id, None


def resolve_base_model(
    base_model: str, family: str, settings: Settings, revision: str | None = None
) -> tuple[str, Path | None]:
    """Where to load `base_model`, trained or run as family `family`, from: an absolute pipeline
    folder ("~" expanded), a folder name under the models root, or a hub id (owner/name:
    lorastudio's fetched copy, the hub cache, or the hub). The one resolution of a base model:
    the job service, the engine's preflight and `lorastudio generate` all call it. Every folder
    is vetted by vet_pipeline_folder (the one base-model check).
    Returns (source, local folder or None). Raises ModelSourceError for a missing, incomplete,
    inference-only or untrainable folder, a pipeline of another family, a hub id that is not on
    disk in offline mode, or a value that is neither a folder nor a hub id."""
    given = Path(base_model).expanduser()
    if given.is_absolute():
        candidate: Path | None = given
    elif ".." in given.parts or base_model.startswith((".", "~")):
        raise ModelSourceError(
            f"base_model {base_model!r}: use an absolute path, a name under models/, or a hub id"
        )
    else:
        candidate = settings.models_dir / given
    if candidate is not None and os.path.lexists(candidate):
        folder = candidate.resolve()
        vet_pipeline_folder(folder, family)
        return str(folder), folder
    if given.is_absolute():
        raise ModelSourceError(f"base model folder not found: {base_model}")
    if is_hub_id(base_model):
        return resolve_hub_id(settings, base_model, revision, family)
    raise ModelSourceError(
        f"{base_model!r} is neither a pipeline folder (absolute, or a name under {settings.models_dir}) "
        "nor a hub id (owner/name)"
    )
