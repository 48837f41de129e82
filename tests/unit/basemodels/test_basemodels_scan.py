"""Model folders that are no model's are refused; the catalogue's folder walk is bounded (depth,
entries, time) and its scans cached until a folder changes (issue 24, part 8)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.basemodels import add_folder, list_models
from lorastudio.basemodels import catalogue as catalogue_module
from lorastudio.basemodels.added import added_list_path
from lorastudio.basemodels.layout import folder_size
from lorastudio.errors import ConfigError
from lorastudio.settings import Settings


def _refused(settings: Settings, path: Path | str) -> str:
    with pytest.raises(ConfigError) as info:
        add_folder(settings, str(path))
    (problem,) = info.value.problems
    assert problem.field == "path"
    return problem.message


def test_roots_and_the_studio_home_are_refused(settings: Settings, tmp_path: Path) -> None:
    home = settings.home.resolve()
    assert "is a system folder" in _refused(settings, "/")
    assert "is a system folder" in _refused(settings, "/usr")
    assert "is a system folder" in _refused(settings, "/proc/self")
    assert "is a system folder" in _refused(settings, "/tmp")
    assert f"holds the studio home ({home})" in _refused(settings, home)
    assert "holds the studio home" in _refused(settings, home.parent)
    assert "holds the studio home" in _refused(settings, home.parent.parent)
    assert "inside the studio home" in _refused(settings, settings.outputs_dir)
    assert "listed already" in _refused(settings, settings.models_dir)
    link = tmp_path / "sneaky"
    link.symlink_to("/")  # resolved before the check
    assert "is a system folder" in _refused(settings, link)
    assert any(why in _refused(settings, Path.home()) for why in ("your home folder", "a system folder"))
    assert not added_list_path(settings).exists()  # nothing was written


def test_an_old_list_with_root_is_listed_without_a_walk(settings: Settings, monkeypatch) -> None:
    added_list_path(settings).write_text(json.dumps({"folders": ["/"]}))
    walked: list[Path] = []
    monkeypatch.setattr(catalogue_module, "folder_size", lambda f, **kw: walked.append(f))
    (entry,) = list_models(settings, hub_cache=False, known_captioners=False)
    assert (entry.path, entry.size_bytes, entry.trainable) == ("/", 0, False) and walked == []


def test_the_folder_walk_is_bounded(tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    leaf = deep.joinpath(*[f"d{i}" for i in range(8)])
    leaf.mkdir(parents=True)
    (deep / "top.bin").write_bytes(bytes(10))
    (leaf / "bottom.bin").write_bytes(bytes(1000))
    full = folder_size(deep, max_depth=20)
    assert (full.bytes, full.complete) == (1010, True)
    shallow = folder_size(deep, max_depth=4)
    assert (shallow.bytes, shallow.complete) == (10, False)
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(200):
        (wide / f"f{i}").write_bytes(b"x")
    assert folder_size(wide, max_entries=50).complete is False
    assert folder_size(wide, max_entries=50).bytes <= 50
    assert folder_size(wide).bytes == 200
    assert folder_size(wide, max_seconds=0).complete is False
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "self").symlink_to(loop, target_is_directory=True)  # folder links are not entered
    assert folder_size(loop).complete is True


def test_scans_are_cached_until_the_folder_changes(
    settings: Settings, copy_tiny: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = copy_tiny("flux", settings.models_dir / "mine")
    walks: list[Path] = []
    real = catalogue_module.folder_size
    monkeypatch.setattr(catalogue_module, "folder_size", lambda f, **kw: walks.append(f) or real(f, **kw))
    first = list_models(settings, hub_cache=False, known_captioners=False)
    assert list_models(settings, hub_cache=False, known_captioners=False) == first and walks == [model]
    (model / "vae" / "config.json").unlink()  # a component changes: scanned again
    (changed,) = list_models(settings, hub_cache=False, known_captioners=False)
    assert walks == [model, model] and changed.trainable is False and changed.missing == ["vae/config.json"]
    assert changed.size_bytes < first[0].size_bytes
