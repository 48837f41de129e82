"""The catalogue (models/, added folders, the hub cache filled by the real huggingface_hub client),
deletion rules, and the one vetting function on the training start path and in the preflight."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_hub import FakeHub

from lorastudio import families
from lorastudio.basemodels import (
    add_folder,
    delete_model,
    forget_folder,
    get_model,
    list_models,
    resolve_base_model,
    resolve_hub_id,
)
from lorastudio.basemodels.added import added_list_path
from lorastudio.basemodels.hubcache import hub_cache_dir, hub_endpoint
from lorastudio.errors import ConfigError, JobActive, ModelNotDeletable, ModelSourceError, NotFound
from lorastudio.settings import Settings
from lorastudio.training.preflight import resolve_model_source


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_models_folder_added_folders_and_their_flags(
    settings: Settings, copy_tiny: Callable[..., Path], tmp_path: Path
) -> None:
    tiny = copy_tiny("flux", settings.models_dir / "tiny-flux", marker=True)
    mine = copy_tiny("z-image", settings.models_dir / "my-zimage")
    gguf = settings.models_dir / "flux-gguf"
    gguf.mkdir()
    (gguf / "flux1-dev-Q4_0.gguf").write_bytes(b"GGUF" * 100)
    (settings.models_dir / ".tiny-sdxl.staging-1").mkdir()  # hidden: never listed
    outside = copy_tiny("sdxl", tmp_path / "elsewhere" / "sdxl")
    add_folder(settings, str(outside))
    add_folder(settings, str(outside))  # idempotent

    entries = {e.path: e for e in list_models(settings, hub_cache=False, known_captioners=False)}
    assert list(entries) == [str(gguf), str(mine), str(tiny), str(outside)]
    t, m, g, a = entries[str(tiny)], entries[str(mine)], entries[str(gguf)], entries[str(outside)]
    assert (t.id, t.source, t.family, t.trainable, t.deletable) == ("tiny-flux", "tiny", "flux", True, True)
    assert (m.id, m.source, m.family, m.trainable, m.deletable) == (
        "my-zimage",
        "local",
        "z-image",
        True,
        False,
    )
    assert (g.source, g.family, g.trainable, g.complete, g.deletable) == ("local", None, False, False, False)
    assert "GGUF" in str(g.reason)
    assert (a.source, a.family, a.trainable, a.deletable) == ("added", "sdxl", True, False)
    assert a.id.startswith("added:sdxl-")
    for entry in entries.values():
        assert entry.size_bytes == _disk_bytes(Path(entry.path))
        assert get_model(settings, entry.id) == entry
    assert json.loads(added_list_path(settings).read_text()) == {"folders": [str(outside)]}

    (mine / "vae" / "diffusion_pytorch_model.safetensors").unlink()
    broken = get_model(settings, "my-zimage")
    assert (broken.trainable, broken.complete, broken.missing) == (
        False,
        False,
        ["vae/*.safetensors (weights)"],
    )


def test_adding_bad_paths_is_refused(settings: Settings, tmp_path: Path) -> None:
    for bad in ("relative/folder", str(tmp_path / "absent"), str(settings.models_dir / "x")):
        if bad.endswith("/x"):
            (settings.models_dir / "x").mkdir()
        with pytest.raises(ConfigError) as err:
            add_folder(settings, bad)
        assert err.value.problems[0].field == "path"
    assert not added_list_path(settings).exists()


def test_only_what_lorastudio_made_is_deleted(
    settings: Settings, copy_tiny: Callable[..., Path], tmp_path: Path
) -> None:
    tiny = copy_tiny("flux", settings.models_dir / "tiny-flux", marker=True)
    fetched = copy_tiny("sdxl", settings.models_dir / "acme--sdxl")
    (fetched / "lorastudio_fetch.json").write_text(json.dumps({"repo_id": "acme/sdxl", "revision": None}))
    mine = copy_tiny("z-image", settings.models_dir / "mine")
    linked = settings.models_dir / "linked"
    os.symlink(tiny, linked)  # a link to a tiny model is the user's: its target is not deleted
    added = add_folder(settings, str(copy_tiny("qwen-image", tmp_path / "qwen")))
    added_entry = next(
        e for e in list_models(settings, hub_cache=False, known_captioners=False) if e.source == "added"
    )

    refusals = [
        ("mine", "not downloaded or created"),
        ("linked", "not downloaded or created"),
        (added_entry.id, "folder you added"),
    ]
    for model_id, words in refusals:
        with pytest.raises(ModelNotDeletable, match=words):
            delete_model(settings, model_id)
    with pytest.raises(NotFound):
        delete_model(settings, "no-such-model")
    with pytest.raises(JobActive):
        delete_model(settings, "acme--sdxl", in_use={fetched})
    assert fetched.is_dir() and mine.is_dir() and added.is_dir()

    assert delete_model(settings, "acme--sdxl").path == str(fetched)
    assert delete_model(settings, "tiny-flux").source == "tiny"
    assert sorted(p.name for p in settings.models_dir.iterdir()) == ["linked", "mine"]
    assert forget_folder(settings, added_entry.id) == added and added.is_dir()
    assert [e.id for e in list_models(settings, hub_cache=False, known_captioners=False)] == [
        "mine"
    ]  # the link now dangles


def _cache_snapshot(hub: FakeHub, repo_id: str) -> Path:
    """Download `repo_id` into the hub cache with the real client (as any other tool would)."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, endpoint=hub.url, cache_dir=hub_cache_dir()))


def test_the_hub_cache_is_listed_and_never_deleted(
    settings: Settings, hub: FakeHub, copy_tiny: Callable[..., Path]
) -> None:
    snapshot = _cache_snapshot(hub, "acme/flux")
    hub.repos["acme/sd15"] = type(hub.repos["acme/flux"])(
        {"model_index.json": json.dumps({"_class_name": "StableDiffusionPipeline"}).encode()}
    )
    sd15 = _cache_snapshot(hub, "acme/sd15")
    entries = {e.id: e for e in list_models(settings) if e.source == "hub-cache"}
    assert set(entries) == {"hub:acme--flux", "hub:acme--sd15"}
    flux, sd = entries["hub:acme--flux"], entries["hub:acme--sd15"]
    assert (flux.name, flux.path, flux.family, flux.trainable, flux.deletable) == (
        "acme/flux",
        str(snapshot),
        "flux",
        True,
        False,
    )
    assert flux.size_bytes == _disk_bytes(snapshot) > 0
    assert (sd.path, sd.family, sd.trainable) == (str(sd15), None, False)
    assert "Stable Diffusion 1.x/2.x" in str(sd.reason)
    with pytest.raises(ModelNotDeletable, match="hub cache"):
        delete_model(settings, "hub:acme--flux")
    assert snapshot.is_dir()


def test_the_hub_cache_follows_the_environment_not_the_import_time_constant(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """huggingface_hub.constants.HF_HUB_CACHE is frozen when huggingface_hub is first imported (a
    test that set HF_HUB_CACHE then left it there for the rest of the session); the catalogue
    follows the variables as they are now, by huggingface_hub's own precedence."""
    from huggingface_hub import constants

    stale = tmp_path / "stale-hub"
    snapshot = stale / "models--acme--flux" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    (stale / "models--acme--flux" / "refs").mkdir()
    (stale / "models--acme--flux" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(stale))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9/stale")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert hub_endpoint() == "https://huggingface.co"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    assert [e.id for e in list_models(settings, known_captioners=False) if e.source == "hub-cache"] == []
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert hub_cache_dir() == tmp_path / "legacy"
    monkeypatch.setenv("HF_HUB_CACHE", str(stale))
    assert hub_cache_dir() == stale
    assert [e.id for e in list_models(settings, known_captioners=False) if e.source == "hub-cache"] == [
        "hub:acme--flux"
    ]


def test_hub_ids_are_vetted_from_disk_and_offline_only_disk_counts(
    settings: Settings, hub: FakeHub, copy_tiny: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    flux = families.get("flux")
    assert resolve_hub_id(settings, "acme/unknown", None, "flux") == (
        "acme/unknown",
        None,
    )  # online: loaders fetch
    _cache_snapshot(hub, "acme/flux")
    assert resolve_base_model("acme/flux", "flux", settings) == ("acme/flux", None)
    with pytest.raises(ModelSourceError, match="FluxPipeline"):
        resolve_base_model("acme/flux", "sdxl", settings)

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    requests_before = len(hub.requests)
    assert resolve_base_model("acme/flux", "flux", settings) == ("acme/flux", None)  # cached: fine offline
    for run_check in (
        lambda: resolve_base_model("acme/unknown", "flux", settings),
        lambda: resolve_model_source("acme/unknown", None, flux, settings),
    ):
        with pytest.raises(
            ModelSourceError, match=r"offline mode \(HF_HUB_OFFLINE=1\): acme/unknown is not on disk"
        ):
            run_check()
    with pytest.raises(ModelSourceError, match="offline"):
        resolve_base_model("acme/flux", "flux", settings, revision="v2")  # that revision is not cached
    assert len(hub.requests) == requests_before  # offline: the hub was never asked

    fetched = copy_tiny("flux", settings.models_dir / "acme--other")
    (fetched / "lorastudio_fetch.json").write_text(json.dumps({"repo_id": "acme/other", "revision": None}))
    assert resolve_base_model("acme/other", "flux", settings) == (str(fetched), fetched)  # lorastudio's copy


def test_the_start_path_and_the_preflight_run_the_same_vetting(
    settings: Settings, copy_tiny: Callable[..., Path], tmp_path: Path
) -> None:
    flux = families.get("flux")
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "model-Q4.gguf").write_bytes(b"GGUF")
    partial = copy_tiny("flux")
    shutil.rmtree(partial / "text_encoder_2")
    sd3 = copy_tiny("flux", tmp_path / "sd3")
    (sd3 / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline"}))
    for folder in (gguf, partial, sd3):
        with pytest.raises(ModelSourceError) as from_jobs:
            resolve_base_model(str(folder), "flux", settings)
        with pytest.raises(ModelSourceError) as from_engine:
            resolve_model_source(str(folder), None, flux, settings)
        assert str(from_jobs.value) == str(from_engine.value)
