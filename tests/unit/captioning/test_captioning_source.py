"""Which captioner a folder or hub id is (config.json only): supported kinds, remote code refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorastudio.captioning.source import resolve_captioner
from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.settings import get_settings


def _folder(tmp_path: Path, config: dict) -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_tiny_vlm_folder_is_qwen2_5_vl(tiny_vlm: Path) -> None:
    source = resolve_captioner(get_settings(), str(tiny_vlm))
    assert (source.kind, source.source, source.folder) == (
        "qwen2_5_vl",
        str(tiny_vlm.resolve()),
        tiny_vlm.resolve(),
    )


def test_name_under_models_folder(tmp_path: Path) -> None:
    settings = get_settings().ensure_dirs()
    (settings.models_dir / "cap").mkdir()
    (settings.models_dir / "cap" / "config.json").write_text('{"model_type": "florence2"}', encoding="utf-8")
    assert resolve_captioner(settings, "cap").kind == "florence2"


def test_remote_code_refused_with_reason(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"model_type": "florence2", "auto_map": {"AutoConfig": "x.Florence2Config"}})
    with pytest.raises(ModelSourceError, match="trust_remote_code"):
        resolve_captioner(get_settings(), str(folder))


def test_florence_remote_layout_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"model_type": "florence2", "vision_config": {"model_type": "davit"}})
    with pytest.raises(ModelSourceError, match="remote-code layout"):
        resolve_captioner(get_settings(), str(folder))


def test_unsupported_model_type_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"model_type": "llama"})
    with pytest.raises(ModelSourceError, match="'llama' is not a supported captioner"):
        resolve_captioner(get_settings(), str(folder))


def test_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSourceError, match="no config.json"):
        resolve_captioner(get_settings(), str(tmp_path / "empty"))


def test_offline_hub_id_not_cached_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(
        ModelSourceError,
        match="offline mode .*Qwen/Qwen2.5-VL-3B-Instruct is not on disk.*lorastudio models fetch Qwen/Qwen2.5-VL-3B-Instruct",
    ):
        resolve_captioner(get_settings(), "Qwen/Qwen2.5-VL-3B-Instruct")


def test_hub_id_read_from_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "hub"
    storage = hub / "models--owner--vlm"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text("a" * 40, encoding="utf-8")
    (storage / "snapshots" / ("a" * 40)).mkdir(parents=True)
    (storage / "snapshots" / ("a" * 40) / "config.json").write_text(
        '{"model_type": "qwen2_vl"}', encoding="utf-8"
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    source = resolve_captioner(get_settings(), "owner/vlm")
    assert (source.kind, source.source, source.folder) == ("qwen2_vl", "owner/vlm", None)


def test_bad_revision_and_bad_value() -> None:
    with pytest.raises(ConfigError, match="revision"):
        resolve_captioner(get_settings(), "owner/vlm", revision="bad revision!")
    with pytest.raises(ModelSourceError, match="neither a model folder"):
        resolve_captioner(get_settings(), "not a model")
