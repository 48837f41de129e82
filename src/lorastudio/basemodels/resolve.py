"""Where a hub id's files are on disk, vetted the same way as a local folder.

A hub id given as a base model is checked against what is on disk before anything is loaded:
lorastudio's own fetched copy (models/owner--name, used instead of the hub when no revision is
asked), else the hub cache; offline (HF_HUB_OFFLINE) nothing else exists, so a hub id that is not
on disk is refused with a message that says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lorastudio.basemodels.catalogue import fetched_folder
from lorastudio.basemodels.hubcache import cached_snapshot, hub_cache_dir, hub_offline, is_hub_id
from lorastudio.basemodels.single_file import SingleFileFacts, vet_single_file
from lorastudio.basemodels.vetting import inspect_folder, vet_pipeline_folder
from lorastudio.config_fields_source import local_revision_message
from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError, shown_text
from lorastudio.settings import Settings
from lorastudio.user_paths import expand_user
from lorastudio.user_paths import resolved as resolved_path


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
        if offline or rec.complete or wrong_pipeline or rec.foreign:
            # raises unless complete, of this family and of one model (a partial snapshot's
            # configs are checked too: the loader would download the rest of a mixed folder)
            vet_pipeline_folder(snapshot, family)
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
    folder or single-file checkpoint ("~" expanded), a name under the models root, or a hub id
    (owner/name: lorastudio's fetched copy, the hub cache, or the hub). Every folder is vetted by
    vet_pipeline_folder (the one base-model check), every file by vet_single_file; a file's base
    config is resolved by resolve_base. Returns (source, local folder or None). Raises
    ModelSourceError for a missing, incomplete, inference-only or untrainable folder or file, a
    model of another family, a hub id that is not on disk in offline mode, or a value that is
    neither a folder, a file nor a hub id."""
    found = resolve_base(base_model, family, settings, revision)
    return found.source, found.folder


@dataclass(frozen=True)
class ResolvedBase:
    """A resolved base model: `source` is what the loaders read (a folder path, a hub id, or a
    single file's path); `folder` the local pipeline folder (None otherwise); for a single
    file, `file` its facts and `config` the pipeline folder or hub id its configs come from."""

    source: str
    folder: Path | None
    config: str | None = None
    file: SingleFileFacts | None = None

    @property
    def configs(self) -> str | Path:
        """Where the base's configs (its flavour: Family.source_control_images) are read: the
        local folder, else a single file's base config, else the source (a hub id)."""
        return self.folder or self.config or self.source


def resolve_base(
    base_model: str,
    family: str,
    settings: Settings,
    revision: str | None = None,
    base_config: str | None = None,
) -> ResolvedBase:
    """THE base-model resolution (the job service, the engine's preflight and generation all
    call it). A single-file checkpoint is vetted (basemodels.single_file) and its base config
    resolved like a base model (`base_config`, else the file layout's original hub id), vetted
    as a pipeline of the same family; `revision` then applies to that config's hub id.
    Raises ModelSourceError (see resolve_base_model; base_config problems name base_config),
    ConfigError on "revision" when one is given with a local folder (the base model's, or a
    single file's base_config): it could not be honoured."""
    candidate = _candidate(base_model, settings)
    if os.path.lexists(candidate):
        resolved = resolved_path(candidate)
        if resolved is None:
            raise ModelSourceError(_LOOPS.format(shown_text(base_model)))
        if resolved.is_file():  # `revision` applies to its base config (refused there when local)
            # the file as named, its links not followed: a hub cache's snapshot file (or any link)
            # names a blob without the .safetensors suffix the vetting and the loaders go by
            named = Path(os.path.abspath(candidate))
            facts = vet_single_file(named, family)
            config = resolve_base_config(
                base_config or facts.layout.default_config, family, settings, revision
            )
            return ResolvedBase(str(named), None, config, facts)
        if revision is not None:  # the one rule (config_fields_source): a folder has no revision
            raise ConfigError([FieldProblem("revision", local_revision_message("base_model", base_model))])
        vet_pipeline_folder(resolved, family)
        return ResolvedBase(str(resolved), resolved)
    if _hub_id(base_model):
        return ResolvedBase(*resolve_hub_id(settings, base_model, revision, family))
    raise ModelSourceError(_missing(base_model, settings))


_LOOPS = "base model {} cannot be resolved (a link that loops)"


def _candidate(base_model: str, settings: Settings) -> Path:
    """Where a base model given as `base_model` would be on disk: an absolute path ("~"
    expanded) as it is, a name under the models root. Raises ModelSourceError for a relative
    path that climbs or starts with "." or "~" (relative to nothing the server knows)."""
    given = expand_user(base_model)
    if given.is_absolute():
        return given
    if ".." in given.parts or base_model.startswith((".", "~")):
        raise ModelSourceError(
            f"base_model {shown_text(base_model)}: use an absolute path, a name under models/, or a hub id"
        )
    return settings.models_dir / given


def _hub_id(base_model: str) -> bool:
    """Whether `base_model`, not on disk as a path or a name under models/, names a hub repo."""
    return not expand_user(base_model).is_absolute() and is_hub_id(base_model)


def _missing(base_model: str, settings: Settings) -> str:
    """The refusal of a base model that is on disk nowhere it was looked for (not a hub id)."""
    if expand_user(base_model).is_absolute():
        return f"base model folder not found: {base_model} (no folder or checkpoint file there)"
    return (
        f"{shown_text(base_model)} is neither a pipeline folder or checkpoint file (absolute, or a name under "
        f"{settings.models_dir}) nor a hub id (owner/name)"
    )


def family_free_problem(base_model: str, settings: Settings) -> str | None:
    """resolve_base's refusal of `base_model` where it holds for every family: no folder or file
    there (and not a hub id), a relative path that climbs, a link that loops, a folder that is
    no diffusers pipeline or a pipeline no family trains (SD 1.5, SD3). None where only a family
    could judge it (a hub id not on disk, a pipeline of a family, a checkpoint file).
    `lorastudio generate` without --family says this instead of asking for --family, which
    would not help (it asked for --family of a folder that does not exist)."""
    try:
        candidate = _candidate(base_model, settings)
    except ModelSourceError as err:
        return str(err)
    if not os.path.lexists(candidate):
        return None if _hub_id(base_model) else _missing(base_model, settings)
    resolved = resolved_path(candidate)
    if resolved is None:
        return _LOOPS.format(shown_text(base_model))
    if not resolved.is_dir():
        return None
    rec = inspect_folder(resolved)
    if rec.pipeline_class is None:
        return rec.reason or f"{resolved} is not a diffusers pipeline folder"
    if rec.family is None:
        return f"{resolved}: {rec.reason}"
    return None


def resolve_base_config(base_config: str, family: str, settings: Settings, revision: str | None) -> str:
    """Where a single file's configs (and the components it lacks) come from: a pipeline folder
    (absolute or under models/) or a hub id, vetted as a pipeline of `family`. Returns the
    folder path or hub id. Raises ModelSourceError naming base_config."""
    try:
        found = resolve_base(base_config, family, settings, revision)
    except ModelSourceError as err:
        raise ModelSourceError(f"base_config {base_config!r}: {err}") from None
    except ConfigError:  # a revision with a local base config folder
        raise ConfigError(
            [FieldProblem("revision", local_revision_message("base_config", base_config))]
        ) from None
    if found.file is not None:
        raise ModelSourceError(
            f"base_config {base_config!r} is a checkpoint file; give a pipeline folder or hub id"
        )
    return found.source
