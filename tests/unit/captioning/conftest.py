"""The tiny random Qwen2.5-VL captioner (lorastudio/tiny/vlm.py), built once per session, and a
small dataset factory: coloured PNGs, some with .txt captions, optionally a broken one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220), "white": (250, 250, 250)}


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lorastudio.tiny.vlm import save_tiny_vlm

    return save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-vlm")


@pytest.fixture
def make_dataset(tmp_path: Path) -> Callable[..., Path]:
    """make_dataset(captions={"red": "a red square"}, broken=False) -> folder of 4 PNGs."""

    def make(captions: dict[str, str] | None = None, broken: bool = False, name: str = "ds") -> Path:
        folder = tmp_path / "datasets" / name
        folder.mkdir(parents=True)
        for colour, rgb in COLOURS.items():
            Image.new("RGB", (56 + 8 * len(colour), 48), rgb).save(folder / f"{colour}.png")
        for stem, text in (captions or {}).items():
            (folder / f"{stem}.txt").write_text(text + "\n", encoding="utf-8")
        if broken:
            (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
        return folder

    return make


@pytest.fixture(scope="session")
def tiny_florence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lorastudio.tiny.vlm import save_tiny_vlm

    return save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-florence", kind="florence2")
