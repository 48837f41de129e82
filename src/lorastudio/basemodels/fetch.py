"""Fetch a base model (or a captioning model) from the hub into the studio's models/ folder.

Two steps, so that a bad choice is refused before anything is written:
  plan_fetch  reads metadata only (commit, file list, model_index.json): refuses a bad id, a gated
              or private repo without access, a repo with no diffusers pipeline (GGUF, single-file
              checkpoints, one component), a family lorastudio cannot train, a repo lacking the
              weights training needs; finds a copy already on disk (and, offline, uses only that).
              A repo without model_index.json whose config.json is a supported captioner
              (basemodels/captioners.py: Qwen2.5-VL, Qwen2-VL, native Florence-2) is planned as
              a captioner: its configs, processor files and safetensors weights.
  run_fetch   downloads only the planned files (snapshot_download with exact allow_patterns)
              into a hidden staging folder `models/.<name>.fetching`, checks the result, writes the
              fetch marker and renames the folder into place.

Resumable: files completed by an interrupted or cancelled fetch stay in the staging folder and are
not downloaded again; a connection dropped mid-file is resumed with an HTTP Range request by
huggingface_hub. A refusal (access, missing repo) removes the staging folder.
The token comes from settings.hf_token (else huggingface_hub's own login) and is passed to
huggingface_hub only: never to events, messages, logs or the marker.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from lorastudio.basemodels.accepted import accepted_text, family_of_pipeline
from lorastudio.basemodels.agreement import config_disagreements
from lorastudio.basemodels.captioners import (
    CAPTIONER_TYPES,
    CONFIG,
    captioner_kind,
    captioner_problems,
    folder_captioner,
    read_config,
    select_captioner_files,
)
from lorastudio.basemodels.catalogue import FETCH_MARKER, read_fetch_marker
from lorastudio.basemodels.events import (
    EmitFetch,
    FetchCancelled,
    FetchComplete,
    FetchStarted,
)
from lorastudio.basemodels.fetch_lock import FetchLock
from lorastudio.basemodels.fetch_publish import publish
from lorastudio.basemodels.hubaccess import (
    MAX_CONFIG_BYTES,
    hub_configs,
    hub_errors,
    hub_file,
    remote_listing,
    remote_model_index,
)
from lorastudio.basemodels.hubcache import (
    cached_snapshot,
    hub_cache_dir,
    hub_endpoint,
    hub_offline,
    is_hub_id,
)
from lorastudio.basemodels.layout import (
    MODEL_INDEX,
    inference_only_formats,
    listed_components,
    needs_weights,
    select_training_files,
    weight_suffix,
)
from lorastudio.basemodels.progress import Cancelled, FetchTracker
from lorastudio.basemodels.vetting import inspect_folder, untrainable_reason
from lorastudio.config import revision_problem
from lorastudio.errors import (
    ConfigError,
    FieldProblem,
    ModelAccessDenied,
    ModelSourceError,
    NoSpaceLeft,
    NotFound,
)
from lorastudio.settings import Settings
from lorastudio.tiny import MARKER_FILE as TINY_MARKER
from lorastudio.tiny.vlm import MARKER_FILE as TINY_VLM_MARKER

MAX_WORKERS = 4
# names lorastudio writes or reads in a models/ folder as its own (the fetch and tiny markers)
RESERVED_NAMES = frozenset({FETCH_MARKER, TINY_MARKER, TINY_VLM_MARKER})


@dataclass(frozen=True)
class FetchPlan:
    """What a fetch will do. `present` is set when the model is on disk already (nothing to
    download; `offline` says the hub was not asked); otherwise `files` ({repo path: bytes}) are
    downloaded at `commit` into `target`. `captioner`: the model type of a captioning model
    (basemodels/captioners.py; `family` is then None), None for a base model."""

    repo_id: str
    revision: str | None
    target: Path
    commit: str | None = None
    family: str | None = None
    files: dict[str, int] | None = None
    skipped: tuple[str, ...] = ()
    present: Path | None = None
    offline: bool = False
    captioner: str | None = None

    @property
    def bytes_total(self) -> int:
        return sum((self.files or {}).values())


@dataclass(frozen=True)
class FetchOutcome:
    """How a fetch ended: "completed" (model at `path`, catalogue id `model_id`) or
    "cancelled" (files so far kept in the staging folder for a later fetch)."""

    status: str
    repo_id: str
    model_id: str | None
    path: str | None
    already_present: bool = False
    offline: bool = False


MAX_TARGET_NAME = 200  # bytes: room for the staging and lock affixes within a 255-byte name


def fetch_target(settings: Settings, repo_id: str, revision: str | None = None) -> Path:
    """The models/ folder a fetch of `repo_id` at `revision` goes to: 'owner--name', plus
    '@<revision>' ('/' as '_') when a revision is given. A name over MAX_TARGET_NAME bytes (two
    96-character parts and a long branch name) is cut and given 12 hex of its hash, so that it,
    its staging folder and its lock file stay within the file system's 255 bytes (they were an
    OSError, a 500)."""
    name = repo_id.replace("/", "--") + (f"@{revision.replace('/', '_')}" if revision else "")
    if len(name.encode()) > MAX_TARGET_NAME:
        name = f"{name[: MAX_TARGET_NAME - 13]}-{hashlib.sha1(name.encode()).hexdigest()[:12]}"
    return settings.models_dir / name


def staging_folder(target: Path) -> Path:
    """The hidden folder a fetch of `target` downloads into (stable, so a fetch can resume)."""
    return target.with_name(f".{target.name}.fetching")


def _token(settings: Settings) -> str | None:
    return settings.hf_token.get_secret_value() if settings.hf_token else None


def check_fetch_request(repo_id: str, revision: str | None) -> None:
    """Raise ConfigError unless `repo_id` looks like owner/name and `revision` like a branch,
    tag or commit."""
    problems = []
    if not isinstance(repo_id, str) or not is_hub_id(repo_id):
        problems.append(FieldProblem("repo_id", f"{repo_id!r} is not a hub model id (owner/name)"))
    if revision is not None and (problem := revision_problem(revision)):
        problems.append(FieldProblem("revision", problem))
    if problems:
        raise ConfigError(problems)


def describe_repo_files(repo_id: str, files: list[str]) -> str:
    """Why a repo without model_index.json cannot be trained (GGUF and other inference-only
    formats, single-file checkpoints, a single component), listing what is accepted."""
    formats = inference_only_formats(files)
    root_weights = [p for p in files if "/" not in p and weight_suffix(p) is not None]
    if formats and not any(p.endswith(".safetensors") for p in files):
        what = f"{', '.join(formats)} files, an inference-only format that cannot be trained"
    elif "config.json" in files and root_weights:
        what = "a single model component (config.json + weights at the root), not a whole pipeline"
    elif root_weights:
        what = f"single-file checkpoint(s) ({', '.join(sorted(root_weights)[:3])}), not a diffusers pipeline"
    else:
        what = "no diffusers pipeline (no model_index.json)"
    return f"{repo_id} holds {what}; {accepted_text()}"


def plan_fetch(settings: Settings, repo_id: str, revision: str | None = None) -> FetchPlan:
    """Decide what fetching `repo_id` means, reading metadata only (nothing is written).

    Returns a FetchPlan (with `present` set when the model is already on disk). Raises
    ConfigError (bad id/revision), ModelAccessDenied (gated/private without access), NotFound
    (no such repo or revision), ModelSourceError (not trainable, incomplete repo, offline and not
    on disk, hub unreachable, target folder taken by something else).
    """
    check_fetch_request(repo_id, revision)
    target = fetch_target(settings, repo_id, revision)
    if os.path.lexists(target):
        return _plan_existing(repo_id, revision, target)
    if hub_offline():
        snapshot = cached_snapshot(repo_id, revision)
        if snapshot is not None and (kind := folder_captioner(snapshot)) and not captioner_problems(snapshot):
            return FetchPlan(repo_id, revision, target, present=snapshot, offline=True, captioner=kind)
        rec = inspect_folder(snapshot) if snapshot is not None else None
        if snapshot is not None and rec is not None and rec.trainable:
            return FetchPlan(repo_id, revision, target, family=rec.family, present=snapshot, offline=True)
        found = f" It is in the hub cache but not trainable: {rec.reason}" if rec is not None else ""
        raise ModelSourceError(
            f"offline mode (HF_HUB_OFFLINE=1): {repo_id} is not on disk (looked in {settings.models_dir} and "
            f"the hub cache {hub_cache_dir()}), and nothing is downloaded offline; unset HF_HUB_OFFLINE "
            f"to fetch it.{found}"
        )
    token = _token(settings)
    commit, listed = remote_listing(repo_id, revision, token)
    # a repo path under one of lorastudio's own names (a component folder named like the fetch
    # marker) would take that name in the fetched folder: never fetched, so never trusted
    files = {p: n for p, n in listed.items() if p.split("/", 1)[0] not in RESERVED_NAMES}
    if MODEL_INDEX not in files and CONFIG in files:
        with hub_file(repo_id, CONFIG, commit, token) as path:
            config = read_config(path, repo_id)
        if config.get("model_type") in CAPTIONER_TYPES:
            return _plan_captioner(repo_id, revision, target, commit, config, files)
    if MODEL_INDEX not in files:
        raise ModelSourceError(describe_repo_files(repo_id, sorted(files)))
    index = remote_model_index(repo_id, commit, token)
    family = family_of_pipeline(index.get("_class_name"))
    if family is None:
        raise ModelSourceError(f"{repo_id}: {untrainable_reason(index.get('_class_name'))}")
    selection = select_training_files(index, files)
    if selection.problems:
        raise ModelSourceError(
            f"{repo_id} lacks files training needs: {', '.join(selection.problems)}. "
            "lorastudio loads non-variant .safetensors (or .bin) weights of every pipeline component"
        )
    # the components' configs first (a few small files): one of another model is refused now,
    # not after the whole download
    configs = [f"{c}/{CONFIG}" for c, cls in listed_components(index).items() if needs_weights(cls)]
    with hub_configs(
        repo_id, commit, token, [p for p in configs if p in files and files[p] <= MAX_CONFIG_BYTES]
    ) as got:
        if foreign := config_disagreements(got, index, family.title, family.config_rules):
            raise ModelSourceError(f"{repo_id} mixes components of different models: {'; '.join(foreign)}")
    chosen = {p: files[p] for p in selection.files}
    return FetchPlan(repo_id, revision, target, commit, family.name, chosen, tuple(selection.skipped))


def _plan_captioner(
    repo_id: str, revision: str | None, target: Path, commit: str, config: dict, files: dict[str, int]
) -> FetchPlan:
    """The plan of a captioner repo: its configs, processor files and safetensors weights."""
    kind = captioner_kind(config, repo_id)  # remote code / a remote-code Florence-2 refused here
    taken, left = select_captioner_files(files)
    if not any(p.endswith(".safetensors") for p in taken):
        raise ModelSourceError(
            f"{repo_id} has no .safetensors weights; lorastudio loads captioners from safetensors only"
        )
    chosen = {p: files[p] for p in taken}
    return FetchPlan(repo_id, revision, target, commit, None, chosen, tuple(left), captioner=kind)


def _plan_existing(repo_id: str, revision: str | None, target: Path) -> FetchPlan:
    marker = read_fetch_marker(target) if not target.is_symlink() else None
    if marker is None or marker.get("repo_id") != repo_id or marker.get("revision") != revision:
        raise ModelSourceError(
            f"{target} already exists and is not lorastudio's download of {repo_id}; move it away first"
        )
    kind = folder_captioner(target)
    if kind is not None:
        if missing := captioner_problems(target):
            raise ModelSourceError(
                f"{target} was fetched before but is no longer usable (missing {', '.join(missing)}); delete "
                f"it with `lorastudio models rm {target.name}` and fetch again"
            )
        return FetchPlan(repo_id, revision, target, marker.get("commit"), present=target, captioner=kind)
    rec = inspect_folder(target)
    if not rec.trainable:
        raise ModelSourceError(
            f"{target} was fetched before but is no longer usable ({rec.reason}); delete it with "
            f"`lorastudio models rm {target.name}` and fetch again"
        )
    return FetchPlan(repo_id, revision, target, marker.get("commit"), rec.family, present=target)


def run_fetch(
    settings: Settings,
    plan: FetchPlan,
    *,
    fetch_id: str = "fetch",
    emit: EmitFetch | None = None,
    cancel: threading.Event | None = None,
    lock: FetchLock | None = None,
) -> FetchOutcome:
    """Carry out `plan`: download, check, publish, holding the target's FetchLock (`lock`, which
    this releases, else one taken here: JobActive while another process fetches it; a model
    another process published meanwhile is already present). Emits FetchStarted, FetchProgress
    (throttled) and FetchComplete / FetchCancelled through `emit`; setting `cancel` stops the
    download at the next chunk or file. Returns the FetchOutcome. Raises ModelAccessDenied / NotFound (the
    staging folder is removed), ModelSourceError (a network or hub failure: the files so far
    are kept for a resume; a downloaded pipeline that is not complete: removed)."""
    send = emit or (lambda event: None)
    if plan.present is not None:
        # offline, the copy found is the hub cache's; otherwise lorastudio's own models/ folder
        model_id = "hub:" + plan.repo_id.replace("/", "--") if plan.offline else plan.present.name
        send(
            FetchComplete(
                fetch_id=fetch_id,
                model_id=model_id,
                path=str(plan.present),
                already_present=True,
                offline=plan.offline,
            )
        )
        return FetchOutcome("completed", plan.repo_id, model_id, str(plan.present), True, plan.offline)
    if plan.files is None or plan.commit is None or (plan.family is None and plan.captioner is None):
        raise ModelSourceError(
            f"the fetch plan of {plan.repo_id} names no files at a commit for a family or a captioner "
            "(plan it with plan_fetch)"
        )
    with lock or FetchLock(plan.target, plan.repo_id):
        if os.path.lexists(plan.target):  # another process published it since this one planned
            present = _plan_existing(plan.repo_id, plan.revision, plan.target)
            return run_fetch(settings, present, fetch_id=fetch_id, emit=emit)
        return _run_locked(plan, fetch_id, send, cancel, _token(settings))


def _run_locked(
    plan: FetchPlan, fetch_id: str, send: EmitFetch, cancel: threading.Event | None, token: str | None
) -> FetchOutcome:
    """run_fetch's download, check and publication, under the target's FetchLock."""
    files = plan.files or {}
    staging = staging_folder(plan.target)
    staging.mkdir(parents=True, exist_ok=True)
    tracker = FetchTracker(fetch_id, files, staging, send, cancel)
    send(
        FetchStarted(
            fetch_id=fetch_id,
            repo_id=plan.repo_id,
            revision=plan.revision,
            commit=plan.commit,
            family=plan.family,
            files_total=len(files),
            bytes_total=plan.bytes_total,
        )
    )
    try:
        _download(plan, staging, tracker, token)
    except Cancelled:
        send(FetchCancelled(fetch_id=fetch_id))
        return FetchOutcome("cancelled", plan.repo_id, None, None)
    except (ModelAccessDenied, NotFound):
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except NoSpaceLeft:
        raise NoSpaceLeft(
            f"downloading {plan.repo_id} (the files downloaded so far are kept: fetch again to resume)",
            staging,
        ) from None
    except ModelSourceError as err:
        raise ModelSourceError(
            f"{err}. The files downloaded so far are kept: fetch again to resume"
        ) from None
    tracker.finish()
    publish(plan, staging)
    send(
        FetchComplete(
            fetch_id=fetch_id,
            model_id=plan.target.name,
            path=str(plan.target),
            already_present=False,
            offline=False,
        )
    )
    return FetchOutcome("completed", plan.repo_id, plan.target.name, str(plan.target))


def _download(plan: FetchPlan, staging: Path, tracker: FetchTracker, token: str | None) -> None:
    from huggingface_hub import snapshot_download

    patterns = [re.sub(r"([*?\[])", r"[\1]", path) for path in sorted(plan.files or {})]
    with hub_errors(plan.repo_id, plan.commit, token):
        snapshot_download(
            plan.repo_id,
            revision=plan.commit,
            local_dir=staging,
            cache_dir=hub_cache_dir(),  # files already in the hub cache are copied, not downloaded
            allow_patterns=patterns,
            endpoint=hub_endpoint(),
            token=token,
            max_workers=MAX_WORKERS,
            tqdm_class=tracker.bar_class(),  # type: ignore[arg-type]
        )


def fetch_model(
    settings: Settings,
    repo_id: str,
    revision: str | None = None,
    *,
    emit: EmitFetch | None = None,
    cancel: threading.Event | None = None,
) -> FetchOutcome:
    """plan_fetch + run_fetch in the calling thread (the CLI). Raises as both."""
    return run_fetch(settings, plan_fetch(settings, repo_id, revision), emit=emit, cancel=cancel)
