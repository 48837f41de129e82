"""Known checkpoints (basemodels/checkpoints.py): a same-class checkpoint such as Qwen-Image-2512
is recognised as its family by its pipeline class and named in the catalogue; whether a base is
step-distilled is read from model_index.json, else from its hub repo's row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lorastudio.basemodels import inspect_folder, list_models
from lorastudio.basemodels.checkpoints import KNOWN_CHECKPOINTS, checkpoint_facts, repo_of_folder
from lorastudio.settings import Settings


def _fetched(tiny: Path, models: Path, repo_id: str) -> Path:
    folder = models / repo_id.replace("/", "--")
    shutil.copytree(tiny, folder)
    (folder / "lorastudio_tiny.json").unlink()
    (folder / "lorastudio_fetch.json").write_text(json.dumps({"repo_id": repo_id, "revision": None}))
    return folder


def test_qwen_image_2512_is_a_qwen_image_checkpoint_and_the_catalogue_says_so(tiny_model, tmp_path):
    settings = Settings(home=tmp_path / "home")
    folder = _fetched(tiny_model("qwen-image"), settings.models_dir, "Qwen/Qwen-Image-2512")
    rec = inspect_folder(folder)
    assert rec.family == "qwen-image" and rec.trainable and rec.distilled is False
    assert rec.checkpoint is not None and rec.checkpoint.startswith("Qwen-Image-2512:")
    assert "trains as qwen-image" in rec.checkpoint
    (entry,) = [e for e in list_models(settings, hub_cache=False) if e.path == str(folder)]
    assert entry.name == "Qwen/Qwen-Image-2512" and entry.family == "qwen-image"
    assert entry.checkpoint == rec.checkpoint and entry.public()["distilled"] is False


def test_an_unlisted_folder_names_no_checkpoint(tiny_model):
    rec = inspect_folder(tiny_model("flux"))
    assert rec.family == "flux" and rec.checkpoint is None and rec.distilled is None


def test_the_hub_cache_layout_names_the_repo_and_model_index_outranks_the_row(tiny_model, tmp_path):
    snapshot = tmp_path / "models--Tongyi-MAI--Z-Image-Turbo" / "snapshots" / "abc123"
    shutil.copytree(tiny_model("z-image"), snapshot)
    assert repo_of_folder(snapshot) == "Tongyi-MAI/Z-Image-Turbo"
    facts = checkpoint_facts(snapshot)
    assert facts.distilled is True and facts.known is not None and facts.known.title == "Z-Image Turbo"
    index = json.loads((snapshot / "model_index.json").read_text())
    (snapshot / "model_index.json").write_text(json.dumps({**index, "is_distilled": False}))
    assert checkpoint_facts(snapshot).distilled is False  # what the checkpoint says comes first


def test_every_row_names_a_registered_family():
    from lorastudio import families

    assert {row.family for row in KNOWN_CHECKPOINTS} <= set(families.names())
    assert len({row.repo_id.lower() for row in KNOWN_CHECKPOINTS}) == len(KNOWN_CHECKPOINTS)
