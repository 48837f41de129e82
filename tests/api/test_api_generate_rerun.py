"""A gallery image records every setting that decides its pixels: its settings sent again (as
the gallery lists them) give the same image. Before, an SDXL single-file image made with
`v_prediction: true` (and any image of a hub `revision`) recorded neither: sent again it
rendered with the file's own prediction type, another image."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from api_helpers import LiveServer
from PIL import Image

from generation_fakes import InProcessGeneration
from lorastudio.api.routes.generate import client_request_id, request_of
from lorastudio.api.schemas import GenerateBody
from lorastudio.jobs.generation_inputs import GenerationRequest, LoraChoice, meta_of
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings
from single_files import write_sdxl_file

BODY_KEYS = ("family", "base_model", "base_config", "revision", "v_prediction", "prompt", "negative_prompt",
             "seed", "steps", "width", "height", "guidance", "loras", "references")  # fmt: skip


def _pixels(server: LiveServer, url: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(server.client.get(url).content)), dtype=np.int16)


def test_a_gallery_images_settings_render_it_again(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    settings.ensure_dirs()
    folder = tiny_model("sdxl")
    write_sdxl_file(folder, settings.models_dir / "finetune.safetensors")
    body = {"family": "sdxl", "base_model": "finetune.safetensors", "base_config": str(folder),
            "prompt": "a red circle", "seed": 3, "steps": 2, "width": 64, "height": 64}  # fmt: skip
    made = server.client.post("/api/generate", json={**body, "v_prediction": True})
    assert made.status_code == 201, made.text
    eps = server.client.post("/api/generate", json={**body, "v_prediction": False})
    assert np.abs(_pixels(server, made.json()["url"]) - _pixels(server, eps.json()["url"])).mean() > 1.0

    (listed,) = [
        i for i in server.client.get("/api/gallery").json()["images"] if i["file"] == made.json()["file"]
    ]
    assert listed["v_prediction"] is True and made.json()["v_prediction"] is True
    again = {k: listed[k] for k in BODY_KEYS if listed.get(k) is not None}
    rerun = server.client.post("/api/generate", json=again)
    assert rerun.status_code == 201, rerun.text
    np.testing.assert_array_equal(_pixels(server, rerun.json()["url"]), _pixels(server, made.json()["url"]))


def test_a_damaged_sidecar_costs_its_own_fields_not_the_gallery(client, settings: Settings) -> None:
    """One sidecar with a field of the wrong type (a hand edit, another version's) or a number
    JSON cannot carry made GET /api/gallery a 500 for every image. The listing now keeps each
    image, with the fields of its sidecar that fit (the others left out)."""
    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True)
    sidecars = {
        "typed": '{"prompt": "kept", "seed": "abc", "loras": [{"name": 5, "scale": "x"}], "width": 32}',
        "infinite": '{"prompt": "kept", "guidance": 1e400, "seed": 3}',
        "list": "[1, 2]",
        "broken": "{not json",
        "good": '{"prompt": "kept", "seed": 4, "loras": [{"name": "a", "scale": 0.5}]}',
    }
    for name, text in sidecars.items():
        Image.new("RGB", (8, 8)).save(gallery / f"{name}.png")
        (gallery / f"{name}.json").write_text(text)
    answer = client.get("/api/gallery")
    assert answer.status_code == 200, answer.text
    listed = {i["file"]: i for i in answer.json()["images"]}
    assert set(listed) == {f"{n}.png" for n in sidecars}
    assert listed["typed.png"]["prompt"] == "kept" and listed["typed.png"]["width"] == 32
    assert listed["typed.png"]["seed"] is None and listed["typed.png"]["loras"] == []
    assert listed["infinite.png"]["guidance"] is None and listed["infinite.png"]["seed"] == 3
    assert listed["good.png"]["loras"] == [
        {"name": "a", "scale": 0.5, "step": None, "weights": None, "sha256": None}
    ]
    assert listed["list.png"]["prompt"] is None and listed["broken.png"]["url"] == "/gallery/broken.png"


def test_a_value_of_the_wrong_json_type_is_refused_not_converted(client) -> None:
    """`"steps": true` rendered 1 step, `"width": "32"` and `"seed": "7"` were read as numbers and
    `"v_prediction": "yes"` as true: a generation request's fields take their own JSON types (422
    naming the field), as a training config's do."""
    body = {"family": "flux", "base_model": "nowhere", "prompt": "x"}
    for field, value in (("steps", True), ("width", "32"), ("seed", "7"), ("guidance", "3.5"),
                         ("v_prediction", "yes"), ("prompt", 5), ("steps", 2.0)):  # fmt: skip
        answer = client.post("/api/generate", json={**body, field: value})
        assert answer.status_code == 422, (field, value, answer.text)
        assert [e["loc"] for e in answer.json()["detail"]] == [["body", field]], answer.text
    scale = client.post("/api/generate", json={**body, "loras": [{"name": "a", "scale": "1"}]})
    assert scale.status_code == 422 and scale.json()["detail"][0]["loc"] == ["body", "loras", 0, "scale"]
    number = client.post("/api/generate", json={**body, "guidance": 3, "loras": [{"name": "a", "scale": 1}]})
    assert number.status_code != 422, number.text  # an integer is a number


@pytest.mark.slow
def test_a_gallery_sidecar_sent_back_as_it_stands_renders_the_image_again(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """Fix 1773 added `request_id` and `seconds` to a gallery image's .json sidecar: POSTed back
    as it stands (`curl -d @gallery/<image>.json`) it was a 422 (`seconds`: extra_forbidden), and
    its old request_id a 409. Now `seconds` marks a sidecar: both are read and not used (the
    request is named afresh), on POST /api/generate and POST /api/generations."""
    settings.ensure_dirs()
    body = {"family": "sdxl", "base_model": str(tiny_model("sdxl")), "prompt": "a red circle", "seed": 3,
            "steps": 2, "width": 64, "height": 64, "request_id": "first"}  # fmt: skip
    made = server.client.post("/api/generate", json=body)
    assert made.status_code == 201, made.text
    sidecar = json.loads((settings.home / "gallery" / made.json()["file"]).with_suffix(".json").read_text())
    assert sidecar["request_id"] == "first" and "seconds" in sidecar
    again = server.client.post("/api/generate", json=sidecar)
    assert again.status_code == 201, again.text
    assert again.json()["file"] != made.json()["file"]
    np.testing.assert_array_equal(_pixels(server, again.json()["url"]), _pixels(server, made.json()["url"]))
    queued = server.client.post("/api/generations", json=sidecar)  # its record would keep "first"
    assert queued.status_code == 202, queued.text
    assert queued.json()["request_id"] != "first"
    server.client.post(f"/api/generations/{queued.json()['request_id']}/cancel")


def test_a_sidecar_the_service_wrote_is_a_request_body_as_it_stands(settings: Settings, client) -> None:
    """RELIABILITY 2292: fix 2211 added `warnings` to every gallery sidecar, and GenerateBody
    forbids unknown fields: every sidecar POSTed back as it stands (README) was 422 (`warnings`:
    extra_forbidden); the test below built its sidecar by hand, without it. Here the sidecar is
    the one the service writes (a fake render, no worker)."""
    client.app.state.generation = InProcessGeneration(settings, GpuArbiter())
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}
    made = client.post("/api/generate", json=body)
    assert made.status_code == 201, made.text
    sidecar = json.loads((settings.home / "gallery" / made.json()["file"]).with_suffix(".json").read_text())
    assert sidecar["warnings"] == [] and "seconds" in sidecar
    for sent in (sidecar, {**sidecar, "note": "its client left"}):
        again = client.post("/api/generate", json=sent)
        assert again.status_code == 201, again.text
    queued = client.post("/api/generations", json=sidecar)
    assert queued.status_code == 202, queued.text


def test_a_gallery_sidecar_is_a_request_body_as_it_stands(client) -> None:
    """The sidecar generation.py writes (meta_of, the size, and fix 1773's `request_id` and
    `seconds`), POSTed as it stands: before, 422 (`seconds`: extra_forbidden); now read as the
    request it records (here refused for its LoRA, gone since, by the check after the body's), its
    old request_id not taken as this request's (the slow test above renders it again)."""
    req = GenerationRequest(family="sdxl", base_model="base", prompt="a red circle", seed=3, steps=2,
                            width=64, height=64, loras=(LoraChoice("gone", 0.5),))  # fmt: skip
    sidecar = {
        **meta_of(req, "sdxl", ("0" * 64,)),
        "width": 64,
        "height": 64,
        "request_id": "first",
        "seconds": 1.5,
    }
    answer = client.post("/api/generate", json=sidecar)
    assert answer.status_code == 404 and "gone" in answer.json()["detail"], answer.text
    body = GenerateBody.model_validate(sidecar)
    assert request_of(body) == replace(req, loras=(LoraChoice("gone", 0.5, None, "0" * 64, None),))
    assert client_request_id(body) is None
    assert client_request_id(GenerateBody.model_validate({**sidecar, "seconds": None})) == "first"
