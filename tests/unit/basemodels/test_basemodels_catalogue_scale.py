"""A studio home with hundreds of model entries: listing the catalogue again reads nothing it
read before (each folder's scan and each checkpoint's header are kept until they change), so
the Models screen's every visit costs stats, not a header check per checkpoint (a second or
more for a large header) nor a size walk per folder (up to 2 s each)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.basemodels import catalogue, list_models
from lorastudio.settings import Settings

FOLDERS = 300  # more than the 256 scans the cache kept: a listing evicted each before its reuse
FILES = 20


def _checkpoint(path: Path, tensors: int) -> None:
    """A well-formed safetensors file of `tensors` empty tensors (a header only, no family)."""
    header = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(tensors)}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Path]:
    """Record each call of catalogue.`name` (the real function still runs)."""
    calls: list[Path] = []
    real: Callable[[Path], object] = getattr(catalogue, name)

    def counted(path: Path) -> object:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(catalogue, name, counted)
    return calls


def test_listing_again_reads_no_header_and_walks_no_folder_again(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(FOLDERS):
        folder = settings.models_dir / f"model-{i:03d}"
        folder.mkdir()
        (folder / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    for i in range(FILES):
        _checkpoint(settings.models_dir / f"ckpt-{i:02d}.safetensors", 2_000)
    headers = _counting(monkeypatch, "inspect_file")
    folders = _counting(monkeypatch, "inspect_folder")
    first = list_models(settings, hub_cache=False, known_captioners=False)
    assert (len(first), len(headers), len(folders)) == (FOLDERS + FILES, FILES, FOLDERS)
    again = list_models(settings, hub_cache=False, known_captioners=False)
    assert again == first and (len(headers), len(folders)) == (FILES, FOLDERS)  # nothing read again

    changed = settings.models_dir / "ckpt-07.safetensors"
    _checkpoint(changed, 3)  # a changed file is read again, and only it
    (settings.models_dir / "model-042" / "model_index.json").write_text("{}")  # likewise a folder
    third = {e.id: e for e in list_models(settings, hub_cache=False, known_captioners=False)}
    assert headers[FILES:] == [changed] and folders[FOLDERS:] == [settings.models_dir / "model-042"]
    assert third["model-042"].family is None and third["model-001"].family == "flux"


def test_an_entry_is_bounded_whatever_its_model_index_names(settings: Settings) -> None:
    """A model_index.json naming 20,000 components (and a class name of 100 kB) lists as one
    entry of a few kB: the first MAX_MISSING missing parts, then how many more."""
    folder = settings.models_dir / "sprawling"
    folder.mkdir()
    index = {"_class_name": "X" * 100_000, **{f"part{i}": ["diffusers", "SomeModel"] for i in range(20_000)}}
    (folder / "model_index.json").write_text(json.dumps(index))
    (entry,) = list_models(settings, hub_cache=False, known_captioners=False)
    assert len(json.dumps(entry.public())) < 10_000
    assert entry.missing[-1] == f"... and {20_000 - catalogue.MAX_MISSING} more" and not entry.trainable
    assert str(entry.reason).startswith("X" * 100) and "more characters" in str(entry.reason)


def test_an_added_folder_of_many_files_is_read_once(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An added folder that is no model but a library of 30,000 files (more entries than any
    pipeline folder has) was never cached and every listing read and stat'ed all its entries
    (1 s per 100,000 files); now it is read once, and again when its names change."""
    from lorastudio.basemodels import add_folder

    library = tmp_path / "photos"
    library.mkdir()
    for i in range(30_000):
        (library / f"img{i:05d}.jpg").touch()
    add_folder(settings, str(library))
    folders = _counting(monkeypatch, "inspect_folder")
    (entry,) = list_models(settings, hub_cache=False, known_captioners=False)
    assert not entry.trainable and "not a diffusers pipeline folder" in str(entry.reason)
    assert list_models(settings, hub_cache=False, known_captioners=False) == [entry] and folders == [library]
    (library / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    (again,) = list_models(settings, hub_cache=False, known_captioners=False)
    assert folders == [library, library] and again.family == "flux"
