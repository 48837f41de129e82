"""A kohya layout read in place (`datasets/k/10_sks/*.png`, kohya_folders) is captioned in place
(RELIABILITY 2053): each image's caption beside it, read back by the rule a run of the folders
follows (data/kohya_captions.kohya_caption), a `.caption` rewritten where it is the image's one
caption file, an image with two refused, and a killed worker's staged files there removed. A fake
captioner (no model loaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from lorastudio.captioning import vlm
from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.run import caption_dataset
from lorastudio.captioning.source import CaptionerSource
from lorastudio.data.discovery import discover
from lorastudio.data.kohya_captions import kohya_caption
from lorastudio.jobs.caption_job import remove_staged

_SOURCE = CaptionerSource(source="fake", kind="qwen2_5_vl", revision=None, folder=None)


class _FakeCaptioner:
    made = 0

    def __init__(self, source: CaptionerSource, device: str, token: Any = None, gpu: Any = None) -> None:
        self.device, self.cut = "cpu", False

    def caption(self, image: Image.Image, prompt: str | None, max_tokens: int) -> str:
        _FakeCaptioner.made += 1
        return f"model {_FakeCaptioner.made}"

    def close(self) -> None:
        pass


def _layout(root: Path) -> Path:
    folder = root / "datasets" / "k"
    sks, cat = folder / "10_sks", folder / "2_cat"
    for sub, names in ((sks, ["a.png", "b.png", "c.png", "d.png"]), (cat, ["e.png", "f.jpg", "f.png"])):
        sub.mkdir(parents=True)
        for name in names:
            Image.new("RGB", (16, 16), (200, 30, 30)).save(sub / name)
    (sks / "b.caption").write_text("b by hand\n", encoding="utf-8")
    (sks / "c.txt").write_text("c typed\n", encoding="utf-8")
    (sks / "d.txt").write_text("d both\n", encoding="utf-8")
    (sks / "d.caption").write_text("d both\n", encoding="utf-8")
    return folder


def _read(folder: Path) -> dict[str, str | None]:
    """image -> its caption as a run reading the kohya folders in place reads it."""
    out: dict[str, str | None] = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        files = discover(sub, kohya=True)
        for image in files.images:
            out[f"{sub.name}/{image.name}"] = kohya_caption(files.caption_files.get(image.stem, ())).text
    return out


def test_a_kohya_layout_is_captioned_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It was refused (fix 1944: "import it with datasets import --kohya"); before that,
    "captioned" with 0 images."""
    monkeypatch.setattr(vlm, "Captioner", _FakeCaptioner)
    monkeypatch.setattr(_FakeCaptioner, "made", 0)
    folder = _layout(tmp_path)
    events: list[dict[str, Any]] = []
    summary = caption_dataset(folder, _SOURCE, CaptionOptions(model="fake", device="cpu"), events.append)
    assert summary.captioned == [
        ("10_sks/a.png", "model 1"),
        ("2_cat/e.png", "model 2"),
        ("2_cat/f.jpg", "model 3"),
    ]
    assert summary.skipped == ["10_sks/b.png", "10_sks/c.png", "10_sks/d.png", "2_cat/f.png"]
    assert events[0]["total"] == 3 and events[0]["skipped"] == 4
    assert _read(folder) == {
        "10_sks/a.png": "model 1",
        "10_sks/b.png": "b by hand",
        "10_sks/c.png": "c typed",
        "10_sks/d.png": "d both",
        "2_cat/e.png": "model 2",
        "2_cat/f.jpg": "model 3",
        "2_cat/f.png": "model 3",  # one f.txt for both, as a run reads it
    }
    assert not (folder / "metadata.jsonl").exists()

    summary = caption_dataset(
        folder, _SOURCE, CaptionOptions(model="fake", device="cpu", overwrite=True), events.append
    )
    assert [name for name, _ in summary.captioned] == [
        "10_sks/a.png", "10_sks/b.png", "10_sks/c.png", "2_cat/e.png", "2_cat/f.jpg"
    ]  # fmt: skip
    ((refused, why),) = summary.failures
    assert refused == "10_sks/d.png" and why.startswith(
        "d.caption and d.txt: a run of a kohya folder reads each"
    )
    assert not (folder / "10_sks" / "b.txt").exists()  # b.caption rewritten: no second caption beside it
    read = _read(folder)
    assert read["10_sks/b.png"] == "model 5" and read["10_sks/c.png"] == "model 6"
    assert read["10_sks/d.png"] == "d both"  # kept as it was


def test_a_killed_workers_staged_captions_in_kohya_folders_are_removed(tmp_path: Path) -> None:
    folder = _layout(tmp_path)
    staged = [folder / "10_sks" / ".a.txt.0123abcd.tmp", folder / "2_cat" / ".e.caption.0123abcd.tmp"]
    for path in staged:
        path.write_text("half", encoding="utf-8")
    kept = folder / "2_cat" / ".e.png.0123abcd.tmp"  # not a caption's: not the job's to remove
    kept.write_text("x", encoding="utf-8")
    remove_staged(folder)
    assert not any(path.exists() for path in staged) and kept.exists()
