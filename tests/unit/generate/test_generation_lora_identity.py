"""A gallery image names the exact LoRA files of its pixels (session 25 generation audit).

Before, the sidecar (and PNG text, and `lorastudio generate`'s PNG) recorded a LoRA by its run
name and scale only: a run retrained under the same name, its settings sent again rendered
another image with nothing said; and the worker applied whatever file was at the path when it
got to it, so a file replaced while the request waited (or while it loaded) was rendered and
recorded in the checked file's name. Now each LoRA's sha256 is recorded
(lora/file_digest.py), a request may name it (LoraRef.sha256: that file or a 400), and the
worker applies a file only while it is the bytes the server checked."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from safetensors.torch import load_file, save_file

from live_server import LOOPBACK
from lorastudio.jobs.generation_worker import GenerationJob, Resident, run_job
from lorastudio.settings import Settings


def _variant(lora: Path, out: Path) -> Path:
    """`lora`'s file with its up weights tripled: the same family and layers, another LoRA."""
    from safetensors import safe_open

    with safe_open(str(lora), "pt") as fh:
        metadata = fh.metadata()
    tensors = {k: (v * 3 if "lora_B" in k else v) for k, v in load_file(str(lora)).items()}
    save_file(tensors, str(out), metadata=metadata)
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pixels(client: TestClient, url: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(client.get(url).content)), dtype=np.int16)


def test_a_gallery_image_records_its_loras_sha256_and_a_retrained_one_is_refused_by_it(
    studio_home: Path, tiny_model, flux_lora: Path, tmp_path: Path
) -> None:
    from lorastudio.api.app import create_app

    settings = Settings(home=studio_home)
    settings.ensure_dirs()
    run = settings.outputs_dir / "look" / "look.safetensors"
    run.parent.mkdir(parents=True)
    shutil.copyfile(flux_lora, run)
    first = _sha(run)
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "a red circle", "seed": 2,
            "steps": 1, "width": 32, "height": 32, "loras": [{"name": "look", "scale": 1.0}]}  # fmt: skip
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        made = client.post("/api/generate", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["loras"][0]["sha256"] == first
        (listed,) = client.get("/api/gallery").json()["images"]
        assert listed["loras"] == [
            {"name": "look", "scale": 1.0, "step": None, "weights": None, "sha256": first}
        ]
        png_meta = json.loads(
            Image.open(io.BytesIO(client.get(made.json()["url"]).content)).text["lorastudio"]
        )
        assert png_meta["loras"][0]["sha256"] == first

        os.replace(_variant(flux_lora, tmp_path / "retrained.safetensors"), run)  # the run retrained
        again = {**body, "loras": listed["loras"]}
        refused = client.post("/api/generate", json=again)
        assert refused.status_code == 400, refused.text
        (problem,) = refused.json()["problems"]
        assert problem["field"] == "loras.0.sha256" and f"(now {_sha(run)})" in problem["message"], problem
        assert len(client.get("/api/gallery").json()["images"]) == 1  # nothing rendered for it

        as_is = client.post("/api/generate", json=body)  # without the sha256: the file as it is now
        assert as_is.status_code == 201, as_is.text
        assert as_is.json()["loras"][0]["sha256"] == _sha(run) != first
        assert np.abs(_pixels(client, as_is.json()["url"]) - _pixels(client, made.json()["url"])).max() > 0

        bad = client.post("/api/generate", json={**body, "loras": [{"name": "look", "sha256": "ABC"}]})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "sha256"


def _job(model: Path, out: Path, lora: Path, digest: str) -> GenerationJob:
    return GenerationJob(
        source=str(model), family="flux", revision=None, prompt="a red circle", seed=1, steps=1,
        width=32, height=32, guidance=None, loras=((str(lora), 1.0),), lora_digests=(digest,),
        out_path=str(out), png_meta='{"prompt": "a red circle", "seed": 1}',
    )  # fmt: skip


def test_a_lora_replaced_after_the_servers_check_is_not_applied(
    tiny_model, flux_lora: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's side: replaced while the request waited for the worker, and replaced while
    the worker loaded it (after its first read): refused naming loras.0, no image, and the
    pipeline left without the LoRA; the file as checked renders."""
    import lorastudio.generate as gen

    lora = tmp_path / "run.safetensors"
    shutil.copyfile(flux_lora, lora)
    checked = _sha(lora)
    other = _variant(flux_lora, tmp_path / "other.safetensors")
    resident = Resident()
    out = tmp_path / "img.png"

    os.replace(other, lora)  # replaced while the request waited for the worker
    reply, fatal = run_job(resident, _job(tiny_model("flux"), out, lora, checked))
    assert reply[:2] == ("error", "ConfigError") and not fatal, reply
    assert reply[3][0][0] == "loras.0" and checked in reply[3][0][1] and not out.exists()

    shutil.copyfile(flux_lora, lora)
    apply = gen.apply_loras

    def replaced_while_loading(pipe, loras, cancelled=None):  # noqa: ANN001
        apply(pipe, loras, cancelled)
        if loras:  # the file is swapped once the loader has read it
            os.replace(_variant(flux_lora, tmp_path / "late.safetensors"), lora)

    monkeypatch.setattr(gen, "apply_loras", replaced_while_loading)
    reply, _ = run_job(resident, _job(tiny_model("flux"), out, lora, checked))
    assert reply[:2] == ("error", "ConfigError") and reply[3][0][0] == "loras.0", reply
    assert not out.exists() and not resident.pipe.get_list_adapters().get("transformer")

    monkeypatch.setattr(gen, "apply_loras", apply)
    shutil.copyfile(flux_lora, lora)
    reply, _ = run_job(resident, _job(tiny_model("flux"), out, lora, checked))
    assert reply[0] == "ok" and out.is_file(), reply
