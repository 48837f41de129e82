"""Every /api/datasets/{name}/... route answers a dataset that does not exist alike: 404
DatasetNotFound naming it (RELIABILITY 830). A bulk caption edit answered 400 DatasetError (the
scanner's "dataset folder not found" with the folder's path), a caption edit, an image delete and
the thumbnails 404 "no image ..." as if only the file were missing: each route looked for itself."""

from __future__ import annotations

from fastapi.testclient import TestClient

PREFIX = "/api/datasets/{name}"
CREATES = {("POST", PREFIX + "/files")}  # an upload into a new name makes the dataset

# the body each route would accept for a dataset that exists: the answer must not depend on it
BODIES = {
    ("PUT", PREFIX + "/captions/{file}"): {"caption": "a cat", "expected": ""},
    ("POST", PREFIX + "/captions"): {"append": ", sharp"},
    ("POST", PREFIX + "/rename"): {"to": "other"},
    ("POST", PREFIX + "/caption"): {"model": "florence-2-base"},
}


def _dataset_routes(client: TestClient) -> list[tuple[str, str]]:
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    return [
        (method.upper(), path)
        for path, ops in paths.items()
        if path == PREFIX or path.startswith(PREFIX + "/")
        for method in ops
        if (method.upper(), path) not in CREATES
    ]


def test_every_dataset_route_answers_a_missing_dataset_404(client: TestClient) -> None:
    routes = _dataset_routes(client)
    assert len(routes) >= 11, (
        routes
    )  # the walk found the dataset routes (detail, edits, thumbnails, caption jobs)
    wrong = {}
    for method, path in routes:
        url = path.replace("{name}", "ghost").replace("{file}", "a.png")
        for body in (BODIES.get((method, path)), {}):  # a usable body, then an empty one
            resp = client.request(method, url, json=body if method in ("POST", "PUT") else None)
            answer = (
                resp.json() if resp.headers.get("content-type", "").startswith("application/json") else None
            )
            expected = {"error": "DatasetNotFound", "detail": "no dataset named 'ghost'", "dataset": "ghost"}
            if resp.status_code != 404 or answer != expected:
                wrong[f"{method} {path} {body}"] = (resp.status_code, resp.text[:160])
    assert not wrong, wrong


def test_a_bulk_caption_edit_of_a_missing_dataset_is_404_not_400(client: TestClient) -> None:
    resp = client.post("/api/datasets/ghost/captions", json={"append": ", sharp", "dry_run": True})
    assert resp.status_code == 404, resp.text
    assert resp.json()["dataset"] == "ghost"
