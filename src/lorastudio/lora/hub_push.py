"""Push a trained LoRA to a Hugging Face Hub model repo, in one commit:

    <name>.safetensors, <name>.json (the sidecar's shared copy: lora/shared.py, its local paths
    named by their last part), README.md (lora/hub_card.py), samples/*.png

    push_lora(settings, "my-run", "me/my-lora", create=False, private=False) -> PushResult

The LoRA and its sidecar are pushed as one pair (lora/push_snapshot.py: the LoRA uploaded from the
descriptor whose header matched the sidecar read, so a resume renaming a new pair into place
during the upload changes neither). The run's newest sample round goes with it (the card shows it). The token is the studio's
(settings.hf_token, LORASTUDIO_HF_TOKEN) else huggingface_hub's login; the endpoint is
HF_ENDPOINT's (basemodels/hubcache.py). huggingface_hub does the upload (`create_commit`: its
preupload + commit protocol); this module picks the files, writes the card and names the failures. No HTTP
server code: the API route and the CLI call push_lora.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lorastudio.basemodels.hubcache import (
    hide_userinfo,
    hub_endpoint,
    hub_transport_errors,
    is_hub_id,
    shown_endpoint,
)
from lorastudio.errors import (
    ConfigError,
    FieldProblem,
    HubAccessDenied,
    HubTokenMissing,
    HubUploadError,
    NotFound,
)
from lorastudio.lora.hub_card import model_card
from lorastudio.lora.push_snapshot import pair_snapshot
from lorastudio.lora.shared import shared_copy
from lorastudio.settings import Settings
from lorastudio.training.sample_files import list_samples
from lorastudio.user_paths import is_file

TOKEN_HINT = "set LORASTUDIO_HF_TOKEN to a token with write access (or log in with `hf auth login`)"


@dataclass(frozen=True)
class PushResult:
    """What a push left on the hub: the repo's URL, the commit and the files in it."""

    repo_id: str
    url: str
    commit: str | None
    files: list[str]


def push_lora(
    settings: Settings, name: str, repo_id: str, *, create: bool = False, private: bool = False
) -> PushResult:
    """Upload the LoRA of run `name` (outputs/<name>/) to the model repo `repo_id`.

    create: make the repo first when it does not exist (private when `private`). Raises
    ConfigError (`repo_id` not an owner/name the hub takes: `a/..`, `a/b--c`, `a/b.git`), NotFound
    (no such LoRA; the repo missing and not `create`), HubTokenMissing (no token), HubAccessDenied
    (the hub refused the token: 401, or it has no write access to the repo: 403), HubUploadError
    (the hub unreachable or failing), JobActive (the LoRA and its sidecar stayed two writes'
    while a run rewrote them: lora/push_snapshot.py).
    """
    if not is_hub_id(repo_id):  # huggingface_hub's own refusal came after the files were read, a 502
        raise ConfigError([FieldProblem("repo", f"{repo_id!r} is not a hub model repo id (owner/name)")])
    run_dir = settings.outputs_dir / name
    lora, sidecar_path = run_dir / f"{name}.safetensors", run_dir / f"{name}.json"
    if "/" in name or not is_file(lora):  # user_paths: never raises (a name over the limits)
        raise NotFound(f"no LoRA {name!r} (looked for {lora})")
    token = _token(settings)
    with pair_snapshot(lora, sidecar_path) as (weights, sidecar):
        samples = _newest_round(run_dir, sidecar)
        shared = (
            json.dumps(shared_copy(sidecar), indent=2) + "\n"
        )  # as training/export writes it, no local path
        files: dict[str, Path | bytes | BinaryIO] = {
            lora.name: weights,
            sidecar_path.name: shared.encode("utf-8"),
        }
        files.update({rel: run_dir / rel for rel, _ in samples})
        files["README.md"] = model_card(sidecar, name, samples).encode("utf-8")
        commit = _upload(files, repo_id, token, create=create, private=private, name=name)
    return PushResult(
        repo_id=repo_id, url=f"{shown_endpoint()}/{repo_id}", commit=commit, files=sorted(files)
    )


def _token(settings: Settings) -> str:
    if settings.hf_token is not None:
        return settings.hf_token.get_secret_value()
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise HubTokenMissing(f"no hub token to push with: {TOKEN_HINT}")
    return token


def _newest_round(run_dir: Path, sidecar: dict) -> list[tuple[str, str | None]]:
    """(path relative to the run, prompt) of the newest step's sample images at or before the
    pushed LoRA's step (the sidecar's `steps`): a resume or extension's rounds land before its
    pair does, and a run that failed after a round left the pair of its last save; neither is
    this LoRA's output (RELIABILITY 2140). A sidecar without an integer `steps` takes the newest."""
    steps = sidecar.get("steps")
    found = [
        f
        for f in list_samples(run_dir)
        if not isinstance(steps, int) or isinstance(steps, bool) or f.step <= steps
    ]
    if not found:
        return []
    prompts = (sidecar.get("config") or {}).get("sample_prompts") or []
    newest = max(f.step for f in found)
    return [
        (f.relative, prompts[f.index] if f.index < len(prompts) else None) for f in found if f.step == newest
    ]


def _upload(
    files: dict[str, Path | bytes | BinaryIO],
    repo_id: str,
    token: str,
    *,
    create: bool,
    private: bool,
    name: str,
) -> str | None:
    """One commit of `files` ({path in the repo: file, bytes or an open file}) to `repo_id` (created first when
    `create`); returns the commit id."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    transport = hub_transport_errors()  # huggingface_hub's HTTP client's errors: not OSErrors
    endpoint = shown_endpoint()  # in messages; the client gets the whole URL
    api = HfApi(endpoint=hub_endpoint(), token=token)
    try:
        if create:
            api.create_repo(repo_id, private=private, exist_ok=True)
        operations = [
            CommitOperationAdd(path_in_repo=dest, path_or_fileobj=str(src) if isinstance(src, Path) else src)
            for dest, src in files.items()
        ]
        info = api.create_commit(repo_id, operations, commit_message=f"lorastudio: LoRA {name}")
    except RepositoryNotFoundError as err:
        status = _status(err)
        if status == 401:
            raise HubAccessDenied(
                f"the hub at {endpoint} refused the token for {repo_id} (401: not accepted, or the "
                f"repo does not exist for it): {TOKEN_HINT}",
                401,
            ) from None
        raise NotFound(
            f"no model repo {repo_id!r} on {endpoint}: create it there, or push with create (--create)"
        ) from None
    except HfHubHTTPError as err:
        status = _status(err)
        if status in (401, 403):
            what = "refused the token (401)" if status == 401 else "gave this token no write access (403)"
            raise HubAccessDenied(
                f"the hub at {endpoint} {what} for {repo_id}: {TOKEN_HINT}", status
            ) from None
        raise HubUploadError(
            f"pushing to {repo_id} on {endpoint} failed: {status}: {_first_line(err)}"
        ) from None
    except (OSError, ValueError, *transport) as err:  # connection refused, DNS, a bad repo id
        raise HubUploadError(f"pushing to {repo_id} on {endpoint} failed: {_first_line(err)}") from None
    return getattr(info, "oid", None)


def _status(err: Exception) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


def _first_line(err: Exception) -> str:
    return hide_userinfo((str(err).splitlines() or [type(err).__name__])[0][:300])
