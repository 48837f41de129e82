"""A generated PNG's text chunks name no local folder (session 29 observability audit).

The PNG is what a user shares; its "lorastudio" chunk carried the base model and each LoRA as
the command or the request resolved them: `lorastudio generate --base ./tinyflux --lora my-run`
wrote `/home/<user>/.../tinyflux` and `<home>/outputs/my-run/my-run.safetensors`, the
gallery's PNG the base model's path the UI sent. Now the CLI's PNG records them as typed (sent
again from the same folder: the same files, which the sha256 and base identity vouch for) and
the gallery's names the base by its last part (lora/shared.py); the gallery's .json sidecar keeps
the path (generate again reads it)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.jobs.generation_worker import GenerationJob, Resident, run_job
from lorastudio.lora.file_digest import lora_digest
from lorastudio.lora.shared import shared_copy
from lorastudio.settings import get_settings


def _chunk(png: Path) -> dict:
    with Image.open(png) as image:
        return json.loads(image.text["lorastudio"])  # type: ignore[attr-defined]


def test_lorastudio_generates_png_names_the_base_and_lora_not_their_folders(
    flux_lora: Path, tiny_model: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = get_settings().outputs_dir / "my-run"
    run.mkdir(parents=True)
    shutil.copy(flux_lora, run / "my-run.safetensors")
    base = tiny_model("flux")
    monkeypatch.chdir(base.parent)  # the base typed relative: `--base ./<name>`
    if not app.registered_commands:
        _register()
    args = [
        "generate",
        "--base",
        f"./{base.name}",
        "--prompt",
        "a red square",
        "--out",
        str(tmp_path / "a.png"),
    ]
    args += ["--steps", "1", "--width", "32", "--height", "32", "--device", "cpu", "--lora", "my-run:0.8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    chunk = _chunk(tmp_path / "a.png")
    text = json.dumps(chunk)
    assert str(base.parent) not in text and str(get_settings().home) not in text, text
    assert chunk["base_model"] == f"./{base.name}"  # as typed
    assert chunk["loras"] == [
        {"file": "my-run", "scale": 0.8, "sha256": lora_digest(run / "my-run.safetensors")}
    ]
    again = [*args[:-1], f"{chunk['loras'][0]['file']}:0.8"]  # sent again as recorded: the same image
    again[again.index("--out") + 1] = str(tmp_path / "b.png")
    assert CliRunner().invoke(app, again).exit_code == 0
    assert Image.open(tmp_path / "b.png").tobytes() == Image.open(tmp_path / "a.png").tobytes()


def test_a_gallery_png_names_its_base_by_its_last_part(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """The worker writes the server's settings (jobs/generation_inputs.meta_of: the base model as
    the request gave it, here an absolute path) into the PNG without the folders."""
    base = tiny_model("flux")
    meta = {"prompt": "a red circle", "seed": 1, "family": "flux", "base_model": str(base), "loras": []}
    out = tmp_path / "img.png"
    job = GenerationJob(
        source=str(base), family="flux", revision=None, prompt="a red circle", seed=1, steps=1, width=32,
        height=32, guidance=None, loras=(), lora_digests=(), out_path=str(out), png_meta=json.dumps(meta),
    )  # fmt: skip
    reply, fatal = run_job(Resident(), job)
    assert reply[0] == "ok" and not fatal, reply
    chunk = _chunk(out)
    assert chunk["base_model"] == base.name and str(base.parent) not in json.dumps(chunk)
    assert chunk["prompt"] == "a red circle" and chunk["width"] == 32


def test_shared_copy_names_paths_by_their_last_part_and_keeps_the_rest() -> None:
    sidecar = {
        "base_model": "/home/alice/models/FLUX.1-dev",
        "dataset": {
            "path": "/home/alice/pics/me",
            "entries": [{"label": "~/pics/me", "path": "/home/alice/pics/me"}],
        },
        "config": {
            "base_model": "/home/alice/models/FLUX.1-dev",
            "base_config": "black-forest-labs/FLUX.1-dev",  # a hub id stays whole
            "data_dir": "me",  # a name under datasets/ stays
            "control_dirs": ["/home/alice/pics/ctl", "C:\\Users\\alice\\ctl2"],
            "assistant_lora": "/home/alice/loras/adapter.safetensors",
            "sample_prompts": ["/imagine a cat", {"prompt": "x", "controls": ["control/a.png"]}],
        },
        "loras": [{"file": "./out/x.safetensors", "scale": 1.0}],
    }
    shared = shared_copy(sidecar)
    assert "alice" not in json.dumps(shared)
    assert shared["base_model"] == shared["config"]["base_model"] == "FLUX.1-dev"
    assert shared["dataset"] == {"path": "me", "entries": [{"label": "me", "path": "me"}]}
    assert (
        shared["config"]["base_config"] == "black-forest-labs/FLUX.1-dev"
        and shared["config"]["data_dir"] == "me"
    )
    assert shared["config"]["control_dirs"] == ["ctl", "ctl2"]
    assert shared["config"]["assistant_lora"] == "adapter.safetensors"
    assert shared["config"]["sample_prompts"] == [
        "/imagine a cat",
        {"prompt": "x", "controls": ["control/a.png"]},
    ]
    assert shared["loras"] == [{"file": "x.safetensors", "scale": 1.0}]
    assert sidecar["base_model"] == "/home/alice/models/FLUX.1-dev"  # the original untouched
