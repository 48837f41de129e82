"""A dataset renamed through the studio (POST /api/datasets/NAME/rename, `datasets rename`)
left its decoded-images record under the old folder's key: every image of the renamed dataset
was decoded again at its next check (a run's scan decodes them all: minutes for a large set),
and the old record waited for the start's sweep. RELIABILITY 2212: the record and its journal
go with the folder (data/dataset_names.rename_dataset, decoded_files.move_record)."""

from __future__ import annotations

import io

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.data.decoded import DecodedRecord
from lorastudio.data.safe_open import folder_identity
from lorastudio.settings import Settings


def _png(colour: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(buf, format="PNG")
    return buf.getvalue()


def test_a_renamed_dataset_keeps_its_decoded_images_record(client: TestClient, settings: Settings) -> None:
    for batch, colour in enumerate(("red", "blue")):  # two saves: the record and a journal line
        files = [("files", (f"{colour}.png", _png(colour), "image/png"))]
        assert client.post("/api/datasets/pets/files", files=files).status_code == 201, batch
    records = settings.decoded_record_dir
    before = sorted(p.suffix for p in records.iterdir())
    assert before == [".journal", ".json"]
    renamed = client.post("/api/datasets/pets/rename", json={"to": "cats"})
    assert renamed.status_code == 200, renamed.text
    folder = settings.datasets_dir / "cats"
    record = DecodedRecord.load(records, folder, folder_identity(folder))
    assert all(record.known(folder / f"{c}.png") is not None for c in ("red", "blue"))
    assert sorted(p.suffix for p in records.iterdir()) == before  # none left under the old name
