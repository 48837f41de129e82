"""Captioning models in the catalogue (kind "captioner"): the known rows before anything is on
disk, a captioner fetched through the real huggingface_hub client from the fake hub by the base
models' fetch path (only its configs, processor and safetensors weights), then listed, resolved by
catalogue id or hub id, and captioning a dataset with the tiny random Qwen2.5-VL it holds; a
not-yet-fetched catalogue id and an unknown id refused with what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_hub import FakeHub, FakeRepo, folder_files
from PIL import Image
from typer.testing import CliRunner

from lorastudio.basemodels import fetch_model, get_model, list_models, plan_fetch
from lorastudio.basemodels.captioners import KNOWN_CAPTIONERS
from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.run import caption_dataset
from lorastudio.captioning.source import resolve_captioner
from lorastudio.errors import ModelSourceError
from lorastudio.settings import Settings

REPO = "Qwen/Qwen2.5-VL-3B-Instruct"  # a known row: the fetched tiny model takes its place


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lorastudio.tiny.vlm import save_tiny_vlm

    return save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-vlm")


def _captioner_repo(tiny_vlm: Path) -> dict[str, bytes]:
    """The tiny VLM as a hub repo, plus what a real repo carries that captioning does not load."""
    files = {p: b for p, b in folder_files(tiny_vlm).items() if p != "lorastudio_tiny_vlm.json"}
    files.update(
        {
            "README.md": b"# tiny vlm\n",
            ".gitattributes": b"*.safetensors filter=lfs\n",
            "pytorch_model.bin": b"bin twin" * 10,
            "onnx/model.onnx": b"onnx" * 10,
            "modeling_extra.py": b"raise SystemExit('never run')\n",
        }
    )
    return files


def _dataset(settings: Settings) -> Path:
    folder = settings.datasets_dir / "cards"
    folder.mkdir(parents=True)
    for i, rgb in enumerate([(200, 20, 20), (20, 200, 20)]):
        Image.new("RGB", (48, 40), rgb).save(folder / f"card{i}.png")
    return folder


def test_known_captioners_are_listed_before_anything_is_on_disk(settings: Settings) -> None:
    entries = [e for e in list_models(settings, hub_cache=False) if e.kind == "captioner"]
    assert [(e.id, e.repo_id, e.source) for e in entries] == [
        ("florence-community--Florence-2-base", "florence-community/Florence-2-base", "catalogue"),
        ("florence-community--Florence-2-large", "florence-community/Florence-2-large", "catalogue"),
        ("Qwen--Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct", "catalogue"),
        ("Qwen--Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "catalogue"),
    ]
    by_repo = {row.repo_id: row for row in KNOWN_CAPTIONERS}
    for entry in entries:
        row = by_repo[entry.repo_id or ""]
        assert (entry.licence, entry.size_bytes, entry.path) == (row.licence, row.size_bytes, "")
        assert not entry.trainable and entry.family is None and not entry.deletable
        assert entry.missing == [f"not fetched: `lorastudio models fetch {entry.repo_id}`"]
    assert {e.licence for e in entries} == {"MIT", "Apache-2.0", "Qwen Research License (non-commercial)"}
    assert get_model(settings, "Qwen--Qwen2.5-VL-7B-Instruct").source == "catalogue"
    # the base-model listing of a test that wants only the disk
    assert list_models(settings, hub_cache=False, known_captioners=False) == []


def test_not_fetched_and_unknown_ids_are_refused_with_what_to_do(settings: Settings) -> None:
    with pytest.raises(ModelSourceError) as err:
        resolve_captioner(settings, "Qwen--Qwen2.5-VL-3B-Instruct")
    assert "in the catalogue but not fetched yet" in str(err.value)
    assert f"`lorastudio models fetch {REPO}`" in str(err.value)
    with pytest.raises(ModelSourceError, match="neither a model folder .*a captioner of the catalogue"):
        resolve_captioner(settings, "no-such-captioner")

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    _dataset(settings)
    result = CliRunner().invoke(
        app, ["datasets", "caption", "cards", "--model", "florence-community--Florence-2-base"]
    )
    assert result.exit_code != 0
    assert "lorastudio models fetch florence-community/Florence-2-base" in str(result.exception)


def test_a_captioner_is_fetched_listed_and_captions_by_catalogue_or_hub_id(
    settings: Settings, hub: FakeHub, tiny_vlm: Path
) -> None:
    hub.repos[REPO] = FakeRepo(_captioner_repo(tiny_vlm))
    plan = plan_fetch(settings, REPO)
    assert (plan.family, plan.captioner) == (None, "qwen2_5_vl")
    wanted = sorted(p for p in folder_files(tiny_vlm) if p != "lorastudio_tiny_vlm.json")
    assert sorted(plan.files or {}) == wanted
    assert set(plan.skipped) == {
        "README.md",
        ".gitattributes",
        "pytorch_model.bin",
        "onnx/model.onnx",
        "modeling_extra.py",
    }

    events: list[Any] = []
    outcome = fetch_model(settings, REPO, emit=events.append)
    folder = settings.models_dir / "Qwen--Qwen2.5-VL-3B-Instruct"
    assert (outcome.status, outcome.model_id, outcome.path) == ("completed", folder.name, str(folder))
    kinds = [e.type for e in events]
    assert kinds[0] == "fetch_started" and "fetch_progress" in kinds and kinds[-1] == "fetch_complete"
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert on_disk == sorted([*wanted, "lorastudio_fetch.json"])
    marker = json.loads((folder / "lorastudio_fetch.json").read_text())
    assert (marker["repo_id"], marker["kind"], marker["family"]) == (REPO, "captioner", None)

    (entry,) = [e for e in list_models(settings, hub_cache=False) if e.repo_id == REPO]
    assert (entry.id, entry.source, entry.kind, entry.complete, entry.deletable) == (
        folder.name, "local", "captioner", True, True,
    )  # fmt: skip
    assert entry.licence == "Qwen Research License (non-commercial)" and entry.path == str(folder)
    assert fetch_model(settings, REPO).already_present  # on disk: nothing asked
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    listed = CliRunner().invoke(app, ["models", "list", "--no-hub-cache"]).output.splitlines()
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in listed if "\t" in line}
    assert rows[folder.name][:2] == [REPO, "ready"] and rows[folder.name][3] == entry.licence
    assert rows["Qwen--Qwen2.5-VL-7B-Instruct"][1] == "to fetch"

    by_id = resolve_captioner(settings, folder.name)
    by_hub_id = resolve_captioner(settings, REPO)  # lorastudio's fetched copy, not the hub
    assert by_id == by_hub_id and by_id.folder == folder.resolve() and by_id.kind == "qwen2_5_vl"
    dataset = _dataset(settings)
    options = CaptionOptions(model=folder.name, max_tokens=5, device="cpu", prefix="sks")
    summary = caption_dataset(dataset, by_id, options, lambda event: None)
    assert [f for f, _ in summary.captioned] == ["card0.png", "card1.png"] and not summary.failures
    for stem in ("card0", "card1"):
        assert (dataset / f"{stem}.txt").read_text(encoding="utf-8").startswith("sks, ")


def test_a_remote_code_captioner_repo_is_refused_before_downloading(settings: Settings, hub: FakeHub) -> None:
    config = {"model_type": "florence2", "auto_map": {"AutoModelForCausalLM": "modeling_florence2.F"}}
    hub.repos["microsoft/Florence-2-base"] = FakeRepo(
        {
            "config.json": json.dumps(config).encode(),
            "model.safetensors": b"w" * 64,
            "modeling_florence2.py": b"x",
        }
    )
    with pytest.raises(ModelSourceError, match="trust_remote_code"):
        fetch_model(settings, "microsoft/Florence-2-base")
    assert list(settings.models_dir.iterdir()) == []
