"""A caption a fresh run refuses for another trainer's markup (`{trigger}`, kohya's `|||`: fix
1733), in a dataset made before that fix or by hand, is named by GET /api/datasets/{name} (each
file's `markup`, in the words of the run's refusal) until it is edited (RELIABILITY 1830). Before,
the detail showed it as written with nothing said."""

from __future__ import annotations

from pathlib import Path

from api_helpers import upload_folder
from fastapi.testclient import TestClient

from lorastudio.data.captions import unread_markup


def _markup(client: TestClient) -> dict[str, str | None]:
    return {f["file"]: f["markup"] for f in client.get("/api/datasets/shapes").json()["files"]}


def test_the_detail_names_markup_a_run_refuses_until_it_is_edited(
    client: TestClient, sample_dataset: Path
) -> None:
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    folder = Path(client.get("/api/datasets/shapes").json()["path"])
    (folder / "shape_00.txt").write_text("{trigger}, a red square", encoding="utf-8")  # by hand
    (folder / "shape_01.txt").write_text("red, square ||| blue", encoding="utf-8")
    markup = _markup(client)
    assert markup["shape_00.png"] == unread_markup("{trigger}") and "{trigger}" in markup["shape_00.png"]
    assert markup["shape_01.png"] == unread_markup("|||") and "|||" in markup["shape_01.png"]
    assert [m for f, m in markup.items() if f not in ("shape_00.png", "shape_01.png")] == [None] * 6
    url = "/api/datasets/shapes/captions/shape_00.png"
    assert client.put(url, json={"caption": "[trigger], a red square"}).status_code == 200
    assert _markup(client)["shape_00.png"] is None
