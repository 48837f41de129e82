"""A folder or a link planted at a dataset's claim lock (jobs/dataset_claims.py) in the studio
home: uploads and caption edits through the API still work (the entry is replaced; the old
claim raised IsADirectoryError: a 500), and a folder that cannot be replaced is a 409 naming it."""

from __future__ import annotations

from pathlib import Path

from api_helpers import upload_images
from fastapi.testclient import TestClient

from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
from lorastudio.settings import Settings


def _lock(settings: Settings, name: str) -> Path:
    with DatasetClaim.take(settings.home, settings.datasets_dir, [name], WRITE, "probe") as claim:
        return claim._held[0][2]


def test_a_planted_folder_at_the_claim_lock_is_replaced_or_named(
    client: TestClient, settings: Settings
) -> None:
    upload_images(client, "set", 1)
    lock = _lock(settings, "set")
    lock.mkdir(parents=True)
    upload_images(client, "set", 2)  # an empty folder: replaced by the lock file
    lock.mkdir(parents=True)  # the claims folder went with the last claim
    (lock / "inner.txt").write_text("x")
    answer = client.put("/api/datasets/set/captions/set0.png", json={"caption": "new"})
    assert answer.status_code == 409 and str(lock) in answer.json()["detail"], answer.text
