"""Which captioner a model id or folder is: read its config.json (no torch, no weights).

A model is a catalogue id, a hub id (owner/name) or a folder (absolute, or a name under the models
folder), found the way base models are (basemodels/): a folder is read where it is (a fetched
captioner's catalogue id is its models/ folder, `owner--name`; a known captioner's id that is not
fetched yet is refused naming the command that fetches it); a hub id is read from lorastudio's
fetched copy (models/owner--name at that revision), else the hub cache at `revision` (main by
default) or, online, its config.json is fetched through huggingface_hub with the studio's hub
token (gated / missing repos give the same errors as base models); offline, a hub id not on disk
is refused naming the command that fetches it. The weights are loaded later by the caption worker
(from_pretrained, same revision and token, into the hub cache).

Supported (natively in transformers 5): Qwen2.5-VL (`qwen2_5_vl`), Qwen2-VL (`qwen2_vl`) and
Florence-2 (`florence2` with the native `florence_vision` tower). A config that maps to code in
the repo (`auto_map`, e.g. microsoft/Florence-2-*) is refused: lorastudio never runs remote
code (trust_remote_code); the converted repos (florence-community/Florence-2-*) load natively.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio.basemodels.captioners import (
    CAPTIONER_TYPES,
    CONFIG,
    CaptionerKind,
    captioner_kind,
    known_captioner,
    read_config,
)
from lorastudio.basemodels.catalogue import HUB_PREFIX, fetched_folder
from lorastudio.basemodels.hubaccess import hub_file
from lorastudio.basemodels.hubcache import (
    cached_snapshot,
    hub_cache_dir,
    hub_offline,
    is_hub_id,
)
from lorastudio.config import local_revision_message, revision_problem
from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError
from lorastudio.settings import Settings
from lorastudio.user_paths import expand_user, is_dir

KINDS = CAPTIONER_TYPES


@dataclass(frozen=True)
class CaptionerSource:
    """source: what from_pretrained is given (a folder path or the hub id); kind: the class
    family; revision: for a hub id (None: main); folder: the local folder, when there is one."""

    source: str
    kind: CaptionerKind
    revision: str | None
    folder: Path | None


def _token(settings: Settings) -> str | None:
    return settings.hf_token.get_secret_value() if settings.hf_token else None


def _read_config(path: Path, where: str) -> dict[str, Any]:
    return read_config(path, where)


def _remote_config(repo_id: str, revision: str | None, token: str | None) -> dict[str, Any]:
    with hub_file(repo_id, CONFIG, revision, token) as path:
        return _read_config(path, repo_id)


def fetch_hint(repo_id: str) -> str:
    """How a captioner repo is fetched (the base models' fetch path)."""
    return f"`lorastudio models fetch {repo_id}` (or Fetch on the Models page, POST /api/models/fetch)"


def resolve_captioner(settings: Settings, model: str, revision: str | None = None) -> CaptionerSource:
    """Where captioner `model` loads from and which kind it is (see the module docstring).
    `model`: a catalogue id (a models/ folder name such as a fetched `owner--name`, or
    `hub:owner--name` of the hub cache), a hub id or a folder. Raises ConfigError (a bad
    revision, or one given with a folder: it could not be honoured), ModelSourceError (missing folder, a catalogue captioner not fetched yet (naming
    the command that fetches it), not a supported captioner, remote code, offline and not on
    disk), ModelAccessDenied / NotFound (hub)."""
    if revision is not None and (why := revision_problem(revision)):
        raise ConfigError([FieldProblem("revision", why)])
    if model.startswith(HUB_PREFIX) and is_hub_id(hub_id := model[len(HUB_PREFIX) :].replace("--", "/", 1)):
        model = hub_id  # a hub-cache catalogue id
    given = expand_user(model)
    local = given if given.is_absolute() else settings.models_dir / given
    if given.is_absolute() or (
        ".." not in given.parts and not model.startswith((".", "~")) and is_dir(local)
    ):
        if not is_dir(local):
            raise ModelSourceError(f"captioning model folder not found: {model}")
        if revision is not None:  # the one rule (config_fields_source): a folder has no revision
            raise ConfigError([FieldProblem("revision", local_revision_message("model", model))])
        return _folder_source(local.resolve())
    if not is_hub_id(model):
        known = known_captioner(model)
        if known is not None:
            raise ModelSourceError(
                f"captioner {model!r} ({known.title}) is in the catalogue but not fetched yet: fetch it "
                f"with {fetch_hint(known.repo_id)}, or give its hub id {known.repo_id}"
            )
        raise ModelSourceError(
            f"{model!r} is neither a model folder (absolute, or a name under {settings.models_dir}), "
            "a captioner of the catalogue (`lorastudio models list`) nor a hub id (owner/name)"
        )
    fetched = fetched_folder(settings, model, revision)
    if fetched is not None:  # lorastudio's own download (models/owner--name)
        return _folder_source(fetched)
    snapshot = cached_snapshot(model, revision)
    if snapshot is not None and (snapshot / CONFIG).is_file():
        config = _read_config(snapshot / CONFIG, model)
    elif hub_offline():
        at = f" at revision {revision!r}" if revision else ""
        raise ModelSourceError(
            f"offline mode (HF_HUB_OFFLINE=1): {model}{at} is not on disk (not in {settings.models_dir} "
            f"nor the hub cache {hub_cache_dir()}); fetch it first with {fetch_hint(model)} with the hub "
            "reachable, or unset HF_HUB_OFFLINE"
        )
    else:
        config = _remote_config(model, revision, _token(settings))
    return CaptionerSource(model, captioner_kind(config, model), revision, None)


def _folder_source(folder: Path) -> CaptionerSource:
    kind = captioner_kind(_read_config(folder / CONFIG, str(folder)), str(folder))
    return CaptionerSource(str(folder), kind, None, folder)
