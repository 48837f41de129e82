"""POST /api/generate with `max_sequence_length` (RELIABILITY 810): the text tokens the prompt is
read to, which a run's previews read at the run's own length. Before, Generate read the
pipelines' 512 only (the key was refused as unknown), so a run trained at another length had
previews nothing rendered again. Honoured where the family's pipeline cuts its prompt (recorded in
the PNG, the sidecar and the gallery; the gallery's settings sent again render the same pixels),
refused with the reason where it does not (SDXL's CLIP, Qwen-Image-Edit) or past the family's
cap, before the worker starts."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from api_helpers import LiveServer
from PIL import Image

BODY_KEYS = ("family", "base_model", "prompt", "seed", "steps", "width", "height", "guidance",
             "max_sequence_length", "loras")  # fmt: skip


def _pixels(server: LiveServer, url: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(server.client.get(url).content)), dtype=np.int16)


def test_a_family_that_cannot_read_to_a_length_refuses_it_with_the_reason(
    client, tiny_model: Callable[[str], Path]
) -> None:
    sdxl = {"family": "sdxl", "base_model": str(tiny_model("sdxl")), "prompt": "x", "steps": 1,
            "width": 64, "height": 64, "max_sequence_length": 77}  # fmt: skip
    refused = client.post("/api/generate", json=sdxl)
    assert refused.status_code == 400, refused.text
    (problem,) = refused.json()["problems"]
    assert problem["field"] == "max_sequence_length" and "fixed 77 tokens" in problem["message"]
    flux = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "x", "steps": 1,
            "width": 32, "height": 32}  # fmt: skip
    for tokens in (513, 0):
        over = client.post("/api/generate", json={**flux, "max_sequence_length": tokens})
        assert over.status_code == 400, over.text
        assert over.json()["problems"] == [
            {
                "field": "max_sequence_length",
                "message": f"{tokens}: must be between 1 and 512: FLUX.1's text encoder takes at most 512 tokens",
            }
        ]
    assert client.app.state.generation.worker_pid is None  # refused before any worker


def test_a_length_is_honoured_recorded_and_rendered_again(
    server: LiveServer, tiny_model: Callable[[str], Path]
) -> None:
    client = server.client
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "a red circle on a blue square",
            "seed": 4, "steps": 2, "width": 32, "height": 32}  # fmt: skip
    made = client.post("/api/generate", json={**body, "max_sequence_length": 4})
    assert made.status_code == 201, made.text
    assert made.json()["max_sequence_length"] == 4
    png = Image.open(io.BytesIO(client.get(made.json()["url"]).content))
    assert json.loads(png.text["lorastudio"])["max_sequence_length"] == 4
    default = client.post("/api/generate", json=body)  # the pipeline's 512
    assert default.status_code == 201 and default.json()["max_sequence_length"] is None
    assert np.abs(_pixels(server, made.json()["url"]) - _pixels(server, default.json()["url"])).max() > 0

    (listed,) = [i for i in client.get("/api/gallery").json()["images"] if i["file"] == made.json()["file"]]
    assert listed["max_sequence_length"] == 4
    again = client.post("/api/generate", json={k: listed[k] for k in BODY_KEYS if listed.get(k) is not None})
    assert again.status_code == 201, again.text
    np.testing.assert_array_equal(_pixels(server, again.json()["url"]), _pixels(server, made.json()["url"]))
