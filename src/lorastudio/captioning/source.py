"""Which captioner a model id or folder is: read its config.json (no torch, no weights).

A model is a hub id (owner/name) or a folder (absolute, or a name under the models folder), found
the way base models are (basemodels/): a folder is read where it is; a hub id is read from the
hub cache at `revision` (main by default) or, online, its config.json is fetched through
huggingface_hub with the studio's hub token (gated / missing repos give the same errors as base
models); offline, a hub id not in the cache is refused. The weights are loaded later by the
caption worker (from_pretrained, same revision and token, into the hub cache).

Supported (natively in transformers 5): Qwen2.5-VL (`qwen2_5_vl`), Qwen2-VL (`qwen2_vl`) and
Florence-2 (`florence2` with the native `florence_vision` tower). A config that maps to code in
the repo (`auto_map`, e.g. microsoft/Florence-2-*) is refused: lorastudio never runs remote
code (trust_remote_code); the converted repos (florence-community/Florence-2-*) load natively.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lorastudio.basemodels.hubaccess import hub_file
from lorastudio.basemodels.hubcache import (
    cached_snapshot,
    hub_cache_dir,
    hub_offline,
    is_hub_id,
)
from lorastudio.config import revision_problem
from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError
from lorastudio.settings import Settings
from lorastudio.user_paths import expand_user, is_dir

CaptionerKind = Literal["qwen2_5_vl", "qwen2_vl", "florence2"]
KINDS: tuple[str, ...] = ("qwen2_5_vl", "qwen2_vl", "florence2")
CONFIG = "config.json"


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


def captioner_kind(config: dict[str, Any], where: str) -> CaptionerKind:
    """The captioner kind of a parsed config.json. Raises ModelSourceError naming `where` and
    the reason: remote code, an unsupported model type, a Florence-2 of the remote-code layout."""
    model_type = config.get("model_type")
    if config.get("auto_map"):
        raise ModelSourceError(
            f"{where}: its config.json maps to code in the repo (auto_map), which needs "
            "trust_remote_code; lorastudio does not run remote code. Use a natively supported "
            "checkpoint (Qwen2.5-VL, or a converted Florence-2 such as florence-community/Florence-2-base)"
        )
    if model_type not in KINDS:
        raise ModelSourceError(
            f"{where}: model type {model_type!r} is not a supported captioner (supported: {', '.join(KINDS)})"
        )
    if model_type == "florence2":
        vision = config.get("vision_config") or {}
        if vision.get("model_type") not in (None, "florence_vision"):
            raise ModelSourceError(
                f"{where}: a Florence-2 of the remote-code layout (vision tower "
                f"{vision.get('model_type')!r}); use a converted checkpoint (florence-community/Florence-2-*)"
            )
    return model_type  # type: ignore[return-value]


def _read_config(path: Path, where: str) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelSourceError(f"{where}: no {CONFIG} (not a transformers model folder)") from None
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"{where}: {CONFIG} cannot be read: {err}") from None
    if not isinstance(config, dict):
        raise ModelSourceError(f"{where}: {CONFIG} is not a JSON object")
    return config


def _remote_config(repo_id: str, revision: str | None, token: str | None) -> dict[str, Any]:
    with hub_file(repo_id, CONFIG, revision, token) as path:
        return _read_config(path, repo_id)


def resolve_captioner(settings: Settings, model: str, revision: str | None = None) -> CaptionerSource:
    """Where captioner `model` loads from and which kind it is (see the module docstring).
    Raises ConfigError (a bad revision), ModelSourceError (missing folder, not a supported
    captioner, remote code, offline and not cached), ModelAccessDenied / NotFound (hub)."""
    if revision is not None and (why := revision_problem(revision)):
        raise ConfigError([FieldProblem("revision", why)])
    given = expand_user(model)
    local = given if given.is_absolute() else settings.models_dir / given
    if given.is_absolute() or (
        ".." not in given.parts and not model.startswith((".", "~")) and is_dir(local)
    ):
        if not is_dir(local):
            raise ModelSourceError(f"captioning model folder not found: {model}")
        folder = local.resolve()
        kind = captioner_kind(_read_config(folder / CONFIG, str(folder)), str(folder))
        return CaptionerSource(str(folder), kind, None, folder)
    if not is_hub_id(model):
        raise ModelSourceError(
            f"{model!r} is neither a model folder (absolute, or a name under {settings.models_dir}) "
            "nor a hub id (owner/name)"
        )
    snapshot = cached_snapshot(model, revision)
    if snapshot is not None and (snapshot / CONFIG).is_file():
        config = _read_config(snapshot / CONFIG, model)
    elif hub_offline():
        at = f" at revision {revision!r}" if revision else ""
        raise ModelSourceError(
            f"offline mode (HF_HUB_OFFLINE=1): {model}{at} is not in the hub cache {hub_cache_dir()}; "
            "download it with the hub reachable, or unset HF_HUB_OFFLINE"
        )
    else:
        config = _remote_config(model, revision, _token(settings))
    return CaptionerSource(model, captioner_kind(config, model), revision, None)
