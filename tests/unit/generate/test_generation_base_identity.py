"""A gallery image records its base model's content identity (jobs/generation_base.py), and its
settings sent again on a base replaced under the same name are refused, not rendered as another
image (RELIABILITY 452)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from PIL import Image

from live_server import LOOPBACK
from lorastudio.settings import Settings

BODY = {"family": "flux", "base_model": "my-flux", "prompt": "a red circle", "seed": 2,
        "steps": 1, "width": 32, "height": 32}  # fmt: skip


def _home_with_base(studio_home: Path, tiny_model: Any) -> tuple[Settings, Path]:
    """A studio home whose models/my-flux is a copy of the tiny FLUX.1 pipeline."""
    settings = Settings(home=studio_home)
    settings.ensure_dirs()
    base = settings.models_dir / "my-flux"
    shutil.copytree(tiny_model("flux"), base)
    return settings, base


def test_a_gallery_image_records_its_base_and_a_replaced_base_is_refused_by_it(
    studio_home: Path, tiny_model
) -> None:
    from lorastudio.api.app import create_app
    from lorastudio.tiny import save_tiny_model

    settings, base = _home_with_base(studio_home, tiny_model)
    body = dict(BODY)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        made = client.post("/api/generate", json=body)
        assert made.status_code == 201, made.text
        identity = made.json()["base_identity"]
        assert identity and len(identity) == 20
        (listed,) = client.get("/api/gallery").json()["images"]
        assert listed["base_identity"] == identity
        png = Image.open(io.BytesIO(client.get(made.json()["url"]).content))
        assert json.loads(png.text["lorastudio"])["base_identity"] == identity
        again = {**body, "base_identity": listed["base_identity"]}
        assert client.post("/api/generate", json=again).status_code == 201  # the same base: rendered

        shutil.rmtree(base)
        save_tiny_model("flux", base, seed=1)  # the same name, another model's weights
        refused = client.post("/api/generate", json=again)
        assert refused.status_code == 400, refused.text
        (problem,) = refused.json()["problems"]
        assert problem["field"] == "base_identity" and "'my-flux' is no longer the one" in problem["message"]
        assert len(client.get("/api/gallery").json()["images"]) == 2  # nothing rendered for it
        made = client.post("/api/generate", json=body)  # without it: the base as it is
        assert made.status_code == 201 and made.json()["base_identity"] not in (None, identity)


def test_a_base_replaced_under_its_name_is_rendered_from_its_new_files_not_the_resident_pipeline(
    studio_home: Path, tiny_model
) -> None:
    """RELIABILITY 482: the worker kept the pipeline it loaded, keyed by the base's path, so an
    image asked after the folder was replaced was rendered by the old weights and recorded the
    new base's identity."""
    from lorastudio.api.app import create_app
    from lorastudio.tiny import save_tiny_model

    settings, base = _home_with_base(studio_home, tiny_model)
    body = dict(BODY)

    def pixels(client: TestClient) -> tuple[bytes, str]:
        made = client.post("/api/generate", json=body)
        assert made.status_code == 201, made.text
        png = Image.open(io.BytesIO(client.get(made.json()["url"]).content))
        return png.convert("RGB").tobytes(), made.json()["base_identity"]

    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        old, old_identity = pixels(client)
        shutil.rmtree(base)
        save_tiny_model("flux", base, seed=1)  # the same name, another model's weights
        resident, new_identity = pixels(client)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:  # a fresh worker
        fresh, fresh_identity = pixels(client)
    assert new_identity == fresh_identity != old_identity
    assert fresh != old  # the two models render differently
    assert resident == fresh  # the old code rendered the old weights here


def test_a_base_replaced_while_the_request_waits_for_the_worker_is_refused_by_its_identity(
    studio_home: Path, tiny_model
) -> None:
    """RELIABILITY 482: the identity a request named was compared when it was checked, before
    it waited its turn for the worker; a base replaced meanwhile was rendered."""
    import threading

    from lorastudio.api.app import create_app
    from lorastudio.tiny import save_tiny_model
    from polling import until

    settings, base = _home_with_base(studio_home, tiny_model)
    body = dict(BODY)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        made = client.post("/api/generate", json=body)
        assert made.status_code == 201, made.text
        again = {**body, "base_identity": made.json()["base_identity"]}
        service = client.app.state.generation
        answers: list[Any] = []
        with service._lock:  # the worker busy with another image
            waiting = threading.Thread(
                target=lambda: answers.append(client.post("/api/generate", json=again))
            )
            waiting.start()
            until(
                lambda: len(service._queue) == 1, 60, "the request queued"
            )  # checked (the identity then matched), now queued
            shutil.rmtree(base)
            save_tiny_model("flux", base, seed=1)  # the same name, another model's weights
        waiting.join(120)
        (refused,) = answers
        assert refused.status_code == 400, refused.text  # the old code rendered it: 201
        (problem,) = refused.json()["problems"]
        assert problem["field"] == "base_identity"
        assert len(client.get("/api/gallery").json()["images"]) == 1  # nothing rendered for it


def test_a_scheduler_changed_under_the_base_is_refused_by_the_identity_and_rendered_from_its_files(
    studio_home: Path, tiny_model
) -> None:
    """RELIABILITY 698: the identity was the weights' and tokenizers' alone, so a base whose
    scheduler_config.json changed (edited, re-fetched) rendered a gallery image's settings sent
    again as another image under the old identity, and the resident pipeline kept the old
    scheduler until the server restarted. An image of before (its files identity) still renders."""
    from lorastudio.api.app import create_app
    from lorastudio.basemodels import resolve_base
    from lorastudio.jobs.generation_base import base_identities

    settings, base = _home_with_base(studio_home, tiny_model)
    body = dict(BODY, steps=2)

    def made(client: TestClient, extra: dict | None = None) -> tuple[int, dict, bytes]:
        answer = client.post("/api/generate", json={**body, **(extra or {})})
        if answer.status_code != 201:
            return answer.status_code, answer.json(), b""
        png = Image.open(io.BytesIO(client.get(answer.json()["url"]).content))
        return 201, answer.json(), png.convert("RGB").tobytes()

    _, files = base_identities(resolve_base("my-flux", "flux", settings), "transformer", None)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        _, first, old_pixels = made(client)
        config = base / "scheduler" / "scheduler_config.json"
        scheduler = json.loads(config.read_text())
        config.write_text(json.dumps({**scheduler, "use_dynamic_shifting": False, "shift": 1.0}))
        status, refused, _ = made(client, {"base_identity": first["base_identity"]})
        assert status == 400 and refused["problems"][0]["field"] == "base_identity", refused
        _, second, resident = made(client)
        assert second["base_identity"] != first["base_identity"]
        assert made(client, {"base_identity": files})[0] == 201  # an image of before: its files unchanged
    assert resident != old_pixels  # the new scheduler's sigmas; the old code kept the old scheduler here
