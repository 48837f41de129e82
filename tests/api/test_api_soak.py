"""A studio left running: what repeated operations leave behind must be bounded by the data
kept, not by the operations done (bench/soak.py is the long version on a real server)."""

from __future__ import annotations

from api_helpers import upload_images
from fastapi.testclient import TestClient

from lorastudio.settings import Settings


def test_deleted_datasets_leave_no_decoded_record(client: TestClient, settings: Settings) -> None:
    """Each upload records which images were decoded fully (cache/decoded/, one record per
    dataset folder); a deleted dataset's record stayed, so making and deleting datasets grew the
    cache by a file each time, for ever (a folder made again under the name is a new inode,
    so a new record). Now a delete removes its folder's record."""
    records = settings.decoded_record_dir
    for round_ in range(4):
        for name in ("a", "b"):
            upload_images(client, name, 2, caption=f"round {round_}")
        assert len(list(records.glob("*.json"))) == 2
        for name in ("a", "b"):
            assert client.delete(f"/api/datasets/{name}").status_code == 200
        assert list(records.glob("*.json")) == []
