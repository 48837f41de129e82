"""Session 28 reproducibility audit, from outside: a real `lorastudio serve` on a temp home, its
JSON API and the CLI, tiny FLUX.1 (lora_dropout and EMA) and SDXL runs with a preview and a LoRA
snapshot at every step. Each preview the listing says Generate renders again (its `lora` and
settings, `note` null) is Generate's pixels through the API and the CLI; each it says no file
renders names why; every gallery image sent again with its listed settings is its bytes; the
same request twice, at once and after a restart, the same bytes (RELIABILITY 695-697).
The default suite covers the same in-process: tests/unit/generate/test_sample_parity.py."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image
from reliability_helpers import serve_process, wait_for

from lorastudio.settings import Settings

DOG = {"prompt": "a dog", "seed": 5, "width": 48, "height": 32, "guidance": 4.0}


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _train(client: httpx.Client, config: dict) -> str:
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    wait_for(
        lambda: client.get(f"/api/runs/{run_id}").json()["status"] in ("completed", "failed"), 600, "the run"
    )
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "completed"
    return run_id


def _generate(client: httpx.Client, body: dict) -> tuple[dict, bytes]:
    made = client.post("/api/generate", json=body)
    assert made.status_code == 201, made.text
    return made.json(), client.get(made.json()["url"]).content


@pytest.mark.slow
def test_previews_gallery_and_requests_render_again(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    flux, sdxl = str(tiny_model("flux")), str(tiny_model("sdxl"))
    common = {"data_dir": "shapes", "steps": 2, "batch_size": 2, "learning_rate": 1e-2, "lora_rank": 4,
              "sample_every": 1, "sample_steps": 3, "save_lora_every": 1, "sample_seed": 11}  # fmt: skip
    runs = {
        "fd": ("flux", flux, {"resolution": 32, "lora_dropout": 0.3, "sample_prompts": ["a red circle", DOG]}),
        "fe": ("flux", flux, {"resolution": 32, "ema_decay": 0.5, "sample_prompts": ["a red circle"]}),
        "sx": ("sdxl", sdxl, {"resolution": 64, "sample_prompts": ["a red circle", {**DOG, "width": 64, "height": 64}]}),
    }  # fmt: skip
    with serve_process(settings, client_timeout=300) as (_, client):
        checked, unsaid = 0, 0
        for name, (family, base, extra) in runs.items():
            run_id = _train(
                client, {"family": family, "base_model": base, "output_name": name, **common, **extra}
            )
            prompts = [p if isinstance(p, str) else p["prompt"] for p in extra["sample_prompts"]]
            for sample in client.get(f"/api/runs/{run_id}/samples").json()["samples"]:
                if sample["lora"] is None:  # an EMA preview before the last step: said so
                    assert name == "fe" and sample["step"] == 1 and "EMA" in sample["note"], sample
                    unsaid += 1
                    continue
                assert sample["note"] is None, sample
                body = {"family": family, "base_model": base, "prompt": prompts[sample["index"]],
                        "loras": [{**sample["lora"], "scale": 1.0}],
                        **{k: sample[k] for k in ("seed", "width", "height", "steps", "guidance")}}  # fmt: skip
                _, png = _generate(client, body)
                preview = client.get(sample["url"]).content
                np.testing.assert_array_equal(_pixels(png), _pixels(preview), err_msg=str(sample))
                checked += 1
        assert (checked, unsaid) == (9, 1)

        # the CLI's generate with the step-1 snapshot of the dropout run: the preview's pixels
        out = tmp_path / "cli.png"
        snapshot = settings.outputs_dir / "fd" / "loras" / "fd-step-000001.safetensors"
        cli = [sys.executable, "-m", "lorastudio.cli", "generate", "--base", flux, "--prompt", DOG["prompt"],
               "--lora", str(snapshot), "--seed", "5", "--steps", "3", "--width", "48", "--height", "32",
               "--guidance", "4", "--device", "cpu", "--out", str(out)]  # fmt: skip
        done = subprocess.run(cli, env={**_env(), "LORASTUDIO_HOME": str(settings.home)}, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        preview = settings.outputs_dir / "fd" / "samples" / "step-000001-1.png"
        np.testing.assert_array_equal(_pixels(out.read_bytes()), _pixels(preview.read_bytes()))

        # every gallery image sent again with its listed settings: the same bytes
        gallery = client.get("/api/gallery").json()["images"]
        assert len(gallery) == 9
        for image in gallery:
            keys = (
                "family",
                "base_model",
                "base_identity",
                "prompt",
                "seed",
                "width",
                "height",
                "steps",
                "guidance",
            )
            _, again = _generate(client, {**{k: image[k] for k in keys}, "loras": image["loras"]})
            assert again == client.get(image["url"]).content, image["file"]

        # the same request twice, four at once: the same bytes
        body = {"family": "flux", "base_model": flux, "prompt": "a red circle", "seed": 3, "width": 32,
                "height": 32, "steps": 3, "loras": [{"name": "fd", "scale": 0.7}]}  # fmt: skip
        first = _generate(client, body)[1]
        assert _generate(client, body)[1] == first
        with ThreadPoolExecutor(4) as pool:
            assert all(png == first for _, png in pool.map(lambda _: _generate(client, body), range(4)))
    with serve_process(settings, client_timeout=300) as (_, client):  # and after a restart
        assert _generate(client, body)[1] == first


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)
