"""Where a hub id's files are on disk, vetted the same way as a local folder.

A hub id given as a base model is checked against what is on disk before anything is loaded:
lorastudio's own fetched copy (models/owner--name, used instead of the hub when no revision is
asked), else the hub cache; offline (HF_HUB_OFFLINE) nothing else exists, so a hub id that is not
on disk is refused with a message that says so.
"""

from __future__ import annotations

from pathlib import Path

from lorastudio.basemodels.catalogue import fetched_folder
from lorastudio.basemodels.hubcache import cached_snapshot, hub_cache_dir, hub_offline
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
