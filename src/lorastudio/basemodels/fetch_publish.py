"""The last step of a fetch (basemodels/fetch.py): check that the downloaded files form the
planned model, write the fetch marker, rename the staging folder into place. No torch."""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.basemodels.captioners import captioner_problems, folder_captioner
from lorastudio.basemodels.catalogue import FETCH_MARKER
from lorastudio.basemodels.vetting import inspect_folder
from lorastudio.errors import ModelSourceError, NoSpaceLeft, is_no_space

if TYPE_CHECKING:
    from lorastudio.basemodels.fetch import FetchPlan


def _check_download(plan: FetchPlan, staging: Path) -> str | None:
    """Why the downloaded files do not form the planned model (None: they do)."""
    if plan.captioner is not None:
        missing = captioner_problems(staging)
        if missing or folder_captioner(staging) != plan.captioner:
            return f"do not form a {plan.captioner} captioner (missing {', '.join(missing) or 'its config'})"
        return None
    rec = inspect_folder(staging)
    if not rec.trainable or rec.family != plan.family:
        return f"do not form a trainable pipeline: {rec.reason}"
    return None


def publish(plan: FetchPlan, staging: Path) -> None:
    """Check the downloaded pipeline (or captioner), write the marker, drop huggingface_hub's
    bookkeeping and rename the staging folder into place. Raises ModelSourceError (staging
    removed) when the download does not form the planned, complete model or the target appeared
    meanwhile."""
    if (why := _check_download(plan, staging)) is not None:
        shutil.rmtree(staging, ignore_errors=True)
        raise ModelSourceError(f"the files fetched from {plan.repo_id} {why}")
    marker = {
        "repo_id": plan.repo_id,
        "revision": plan.revision,
        "commit": plan.commit,
        "family": plan.family,
        "kind": "pipeline" if plan.captioner is None else "captioner",
        "files": sorted(plan.files or {}),
        "fetched_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    shutil.rmtree(staging / ".cache", ignore_errors=True)
    try:
        (staging / FETCH_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    except OSError as err:
        if is_no_space(err):
            raise NoSpaceLeft(f"writing the fetch marker of {plan.repo_id}", staging) from None
        raise ModelSourceError(f"cannot write the fetch marker in {staging}: {err}") from None
    try:
        os.rename(staging, plan.target)
    except OSError as err:
        raise ModelSourceError(
            f"{plan.target} appeared while {plan.repo_id} was downloaded ({err}); the download is kept in {staging}"
        ) from None
