"""Reading a hub repo's metadata through huggingface_hub, with its failures turned into domain
errors whose messages say what to do (and never contain the token).

- `hub_errors(...)`: a context manager mapping huggingface_hub / network errors:
  gated repo (401/403) and private or missing repo without access (401) -> ModelAccessDenied,
  missing repo (404) or revision -> NotFound, offline / unreachable / other HTTP -> ModelSourceError,
  a full disk (ENOSPC / EDQUOT while the files are written) -> NoSpaceLeft.
- `remote_listing(...)`: commit + {path: size} of a repo revision.
- `hub_file(...)`: one file of a repo revision, downloaded into a temporary folder.
- `remote_model_index(...)`: the parsed model_index.json (the first file read: this is where a
  gated repo without access is refused, before anything is written).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lorastudio.basemodels.hubcache import (
    hide_userinfo,
    hub_cache_dir,
    hub_endpoint,
    hub_transport_errors,
    shown_endpoint,
)
from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import MODEL_INDEX
from lorastudio.errors import ModelAccessDenied, ModelSourceError, NoSpaceLeft, NotFound, is_no_space

TOKEN_HINT = "set LORASTUDIO_HF_TOKEN (or log in with `hf auth login`)"


def scrub(text: str, token: str | None) -> str:
    """`text` with the token (if any) replaced by '***': as given, and as a repr or a bytes
    repr quotes it (an HTTP client's "Illegal header value b'Bearer ...'" escapes it); and the
    credentials of any URL in it (an HF_ENDPOINT or proxy with `user:secret@`) hidden."""
    text = hide_userinfo(text)
    if not token:
        return text
    forms = {token, repr(token)[1:-1], repr(token.encode("utf-8", "backslashreplace"))[2:-1]}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "***")
    return text


def _status(err: BaseException) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


@contextmanager
def hub_errors(repo_id: str, revision: str | None, token: str | None) -> Iterator[None]:
    """Run hub calls for `repo_id`, raising ModelAccessDenied / NotFound / ModelSourceError
    (see the module docstring) instead of huggingface_hub's and the HTTP client's errors."""
    from huggingface_hub import errors as hf

    transport = hub_transport_errors()  # httpx2's or httpx's HTTPError: not OSErrors
    endpoint = shown_endpoint()
    try:
        yield
    except hf.HFValidationError as err:  # an id or revision huggingface_hub refuses (is_hub_id's backstop)
        raise ModelSourceError(f"{repo_id!r} is not an id the hub accepts: {_first_line(err)}") from None
    except hf.GatedRepoError as err:
        status = _status(err) or 403
        who = "no hub token was sent" if status == 401 else "the hub token has no access to it"
        raise ModelAccessDenied(
            f"{repo_id} is a gated repo and {who} (the hub answered {status}): accept its conditions at "
            f"{endpoint}/{repo_id} while logged in, then {TOKEN_HINT} with a token of that account",
            status,
        ) from None
    except hf.RevisionNotFoundError:
        raise NotFound(f"{repo_id} has no revision {revision!r} on {endpoint}") from None
    except hf.RepositoryNotFoundError as err:
        status = _status(err) or 404
        if status in (401, 403):
            raise ModelAccessDenied(
                f"{repo_id} was not found or is private (the hub answered {status}): check the id; for a "
                f"private repo, {TOKEN_HINT} with a token that can read it",
                status,
            ) from None
        raise NotFound(f"no model repo {repo_id!r} on {endpoint}") from None
    except hf.OfflineModeIsEnabled:
        raise ModelSourceError(
            f"offline mode (HF_HUB_OFFLINE=1): {repo_id} cannot be downloaded; unset HF_HUB_OFFLINE"
        ) from None
    except hf.HfHubHTTPError as err:
        status = _status(err)
        if status in (401, 403):
            raise ModelAccessDenied(
                f"the hub refused access to {repo_id} ({status}); {TOKEN_HINT} with a token that can read it",
                status,
            ) from None
        raise ModelSourceError(
            f"the hub answered {status} for {repo_id}: {scrub(_first_line(err), token)}"
        ) from None
    except UnicodeError:  # a token no HTTP header can carry (settings.hub_token_problem)
        raise ModelSourceError(
            f"the hub token cannot be sent for {repo_id}: it is not printable ASCII (the token is not shown)"
        ) from None
    except OSError as err:
        if is_no_space(err):  # the hub answered; the disk the files go to is full
            raise NoSpaceLeft(f"downloading {repo_id}", err.filename) from None
        raise ModelSourceError(
            f"cannot reach the hub at {endpoint} for {repo_id}: {type(err).__name__}: "
            f"{scrub(_first_line(err), token)}"
        ) from None
    except transport as err:
        raise ModelSourceError(
            f"cannot reach the hub at {endpoint} for {repo_id}: {type(err).__name__}: "
            f"{scrub(_first_line(err), token)}"
        ) from None


def remote_listing(repo_id: str, revision: str | None, token: str | None) -> tuple[str, dict[str, int]]:
    """(commit, {repo path: size in bytes}) of `repo_id` at `revision` (default branch when
    None). Raises as hub_errors."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=hub_endpoint(), token=token)
    with hub_errors(repo_id, revision, token):
        info = api.model_info(repo_id, revision=revision)
        commit = str(info.sha)
        files = {
            f.path: int(f.size or 0)
            for f in api.list_repo_tree(repo_id, revision=commit, recursive=True)
            if isinstance(f, RepoFile)
        }
    return commit, files


@contextmanager
def hub_file(repo_id: str, filename: str, revision: str | None, token: str | None) -> Iterator[Path]:
    """Download one file of `repo_id` at `revision` into a temporary folder (through the studio's
    hub cache and endpoint); yields its path, valid inside the block (the folder is removed
    afterwards). Raises as hub_errors."""
    from huggingface_hub import hf_hub_download

    with tempfile.TemporaryDirectory(prefix="lorastudio-hub-") as tmp:
        with hub_errors(repo_id, revision, token):
            path = hf_hub_download(
                repo_id,
                filename,
                revision=revision,
                local_dir=tmp,
                cache_dir=hub_cache_dir(),
                endpoint=hub_endpoint(),
                token=token,
            )
        yield Path(path)


def remote_model_index(repo_id: str, commit: str, token: str | None) -> dict[str, Any]:
    """The parsed model_index.json of `repo_id` at `commit` (read through a temporary folder that
    is removed). Raises as hub_errors, and ModelSourceError when it is not a JSON object."""
    with hub_file(repo_id, MODEL_INDEX, commit, token) as path:
        try:
            meta = read_json(path)
        except (OSError, ValueError) as err:
            raise ModelSourceError(f"{repo_id}: model_index.json cannot be read: {err}") from None
    if not isinstance(meta, dict):
        raise ModelSourceError(f"{repo_id}: model_index.json is not a JSON object")
    return meta


MAX_CONFIG_BYTES = 1 << 20  # a component config.json larger than this is not read before the fetch


@contextmanager
def hub_configs(repo_id: str, commit: str, token: str | None, paths: list[str]) -> Iterator[Path]:
    """A temporary folder holding the repo's `component/config.json` files `paths` (downloaded
    one by one, small files), laid out as in the repo, so a pipeline's components can be checked
    against each other (basemodels/agreement.py) before any weight is fetched. Raises as
    hub_errors."""
    import shutil

    with tempfile.TemporaryDirectory(prefix="lorastudio-configs-") as tmp:
        for path in paths:
            with hub_file(repo_id, path, commit, token) as got:
                (Path(tmp) / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(got, Path(tmp) / path)
        yield Path(tmp)
