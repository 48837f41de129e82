"""Generation with reference images (issue 27): uploaded once (POST /api/generate/references,
checked like dataset images), named in POST /api/generate, rendered through the edit pipeline
with them, and kept by the gallery beside the image. Bad references are refused by name before
any work."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
from api_helpers import LiveServer
from PIL import Image

from lorastudio.settings import Settings


def _png(seed: int, size: int = 64) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def test_generate_with_uploaded_references_keeps_them_in_the_gallery(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    client = server.client
    up = client.post("/api/generate/references", files=[("f", ("a.png", _png(1))), ("f", ("b.png", _png(2)))])
    assert up.status_code == 201, up.text
    refs = [r["id"] for r in up.json()["references"]]
    assert client.get(up.json()["references"][0]["url"]).content == _png(1)

    body = {"family": "flux2-klein", "base_model": str(tiny_model("flux2-klein")), "prompt": "combine them",
            "steps": 1, "width": 64, "height": 64, "seed": 3}  # fmt: skip
    edited = client.post("/api/generate", json={**body, "references": refs})
    assert edited.status_code == 201, edited.text
    assert edited.json()["references"] == refs and len(edited.json()["reference_urls"]) == 2
    plain = client.post("/api/generate", json=body)
    assert plain.status_code == 201, plain.text
    one = client.post("/api/generate", json={**body, "references": refs[:1]})
    images = [np.asarray(Image.open(io.BytesIO(client.get(r.json()["url"]).content)), dtype=np.float32)
              for r in (edited, plain, one)]  # fmt: skip
    assert np.abs(images[0] - images[1]).max() > 0 and np.abs(images[0] - images[2]).max() > 0
    # a run's control_resolution reaches the worker and the record (RELIABILITY 1490); klein sizes
    # a 64 px reference at a 64 x 64 area as Generate fits it to 64 x 64: the same pixels
    sized = client.post("/api/generate", json={**body, "references": refs[:1], "control_resolution": 64})
    assert sized.status_code == 201, sized.text
    image = np.asarray(Image.open(io.BytesIO(client.get(sized.json()["url"]).content)), dtype=np.float32)
    np.testing.assert_array_equal(image, images[2])

    gallery = {img["file"]: img for img in client.get("/api/gallery").json()["images"]}
    kept = gallery[edited.json()["file"]]
    assert kept["references"] == refs
    assert client.get(kept["reference_urls"][1]).content == _png(2)
    assert gallery[plain.json()["file"]]["references"] == []
    assert gallery[sized.json()["file"]]["control_resolution"] == 64
    assert gallery[plain.json()["file"]]["control_resolution"] is None


def test_bad_references_are_refused_by_name_before_any_work(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    client = server.client
    bad = client.post(
        "/api/generate/references", files=[("f", ("ok.png", _png(1))), ("f", ("broken.png", b"x"))]
    )
    assert bad.status_code == 400 and "broken.png" in bad.text
    folder = settings.home / "gallery" / "references"
    assert not folder.exists() or list(folder.iterdir()) == []  # all or nothing, no staging left
    text = client.post("/api/generate/references", files=[("f", ("notes.txt", b"hello"))])
    assert text.status_code == 400 and "notes.txt: not a PNG, JPEG or WebP image" in text.text

    ref = client.post("/api/generate/references", files=[("f", ("a.png", _png(1)))]).json()["references"][0][
        "id"
    ]
    flux = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "x", "steps": 1,
            "width": 32, "height": 32}  # fmt: skip
    answer = client.post("/api/generate", json={**flux, "references": [ref]})
    assert answer.status_code == 400
    assert {"field": "references", "message": "flux takes no reference images (text-to-image only)"} in (
        answer.json()["problems"]
    )
    klein = {**flux, "family": "flux2-klein", "base_model": str(tiny_model("flux2-klein"))}
    answer = client.post(
        "/api/generate", json={**klein, "references": ["../../etc/passwd", "nope.png"] + [ref] * 3}
    )
    problems = [(p["field"], p["message"]) for p in answer.json()["problems"]]
    assert answer.status_code == 400 and {f for f, _ in problems} == {
        "references.0",
        "references.1",
        "references",
    }
    assert ("references", "flux2-klein takes at most 4 reference images, got 5") in problems
    assert (
        "references",
        "flux2-klein takes reference images of at least 64 px a side: render at 64 px or more",
    ) in problems
    edit = {**flux, "family": "qwen-image-edit", "base_model": str(tiny_model("qwen-image-edit"))}
    answer = client.post("/api/generate", json={**edit, "references": [ref, ref]})  # the family takes 1-3
    assert (
        answer.status_code == 400
        and {  # the checkpoint's flavour (Qwen-Image-Edit, not Plus): 1
            "field": "references",
            "message": "Qwen-Image-Edit takes at most 1 reference images, got 2",
        }
        in answer.json()["problems"]
    )
    answer = client.post(
        "/api/generate", json=edit
    )  # its pipeline renders no text-to-image: it loaded, then refused
    assert (
        answer.status_code == 400
        and {
            "field": "references",
            "message": "Qwen-Image-Edit needs 1 reference image(s), got 0",
        }
        in answer.json()["problems"]
    )
    assert server.app.state.generation.worker_pid is None  # nothing was started
