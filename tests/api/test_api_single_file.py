"""Single-file base checkpoints through the API: the catalogue lists and vets a .safetensors
under models/, the preflight resolves it with its base_config and names both, a GGUF file and an
incomplete file are refused naming the file and the reason, generation renders with it and a
training job (the worker process) trains on it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings
from single_files import write_transformer_file


def test_catalogue_preflight_refusals_and_generation(
    settings: Settings, tiny_model: Callable[[str], Path], sample_dataset: Path
) -> None:
    settings.ensure_dirs()
    folder = tiny_model("chroma")
    file = write_transformer_file(folder, settings.models_dir / "chroma-finetune.safetensors", chroma=True)
    write_transformer_file(
        folder, settings.models_dir / "pruned.safetensors", chroma=True, drop=("final_layer.",)
    )
    (settings.models_dir / "chroma-Q8_0.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    config = {"family": "chroma", "base_model": "chroma-finetune.safetensors", "base_config": str(folder),
              "data_dir": "shapes", "resolution": 32, "steps": 1, "max_sequence_length": 16}  # fmt: skip
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        models = {m["id"]: m for m in client.get("/api/models").json()}
        good = models["chroma-finetune.safetensors"]
        assert good["kind"] == "single-file" and good["family"] == "chroma" and good["trainable"]
        assert "Chroma transformer" in good["checkpoint"]
        assert not models["pruned.safetensors"]["trainable"]
        assert "missing keys of: final layer" in models["pruned.safetensors"]["reason"]
        assert "GGUF" in models["chroma-Q8_0.gguf"]["reason"]

        report = client.post("/api/train/preflight", json={"config": config})
        assert report.status_code == 200, report.text
        body = report.json()
        assert body["config"]["base_model"] == str(file) and body["config"]["base_config"] == str(folder)
        assert body["family"]["single_file"].startswith(f"{file} (Chroma transformer")
        assert f"configs of {folder}" in body["family"]["single_file"]

        for name, words in (("chroma-Q8_0.gguf", "inference-only"), ("pruned.safetensors", "final layer")):
            refused = client.post("/api/train/preflight", json={"config": {**config, "base_model": name}})
            assert refused.status_code == 400
            problem = next(p for p in refused.json()["problems"] if p["field"] == "base_model")
            assert name in problem["message"] and words in problem["message"]
        no_config = {k: v for k, v in config.items() if k != "base_config"}
        refused = client.post("/api/train/preflight", json={"config": no_config})
        problem = next(p for p in refused.json()["problems"] if p["field"] == "base_config")
        assert "lodestones/Chroma1-HD" in problem["message"] and "offline" in problem["message"]

        image = client.post(
            "/api/generate",
            json={
                "family": "chroma",
                "base_model": "chroma-finetune.safetensors",
                "base_config": str(folder),
                "prompt": "a red circle",
                "steps": 2,
                "width": 32,
                "height": 32,
            },  # fmt: skip
        )
        assert image.status_code == 201, image.text
        sidecar = json.loads(Path(image.json()["path"]).with_suffix(".json").read_text())
        assert sidecar["base_model"] == "chroma-finetune.safetensors" and sidecar["base_config"] == str(
            folder
        )
