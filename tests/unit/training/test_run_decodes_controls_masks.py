"""Control images and loss masks get the full decode too (RELIABILITY 166).

Like the targets (RELIABILITY 151, 165), each control image (control/, control_2/ ...) and each
loss mask (masks/) is decoded fully once and remembered in the dataset folder's decoded record,
keyed by its relative path (a control and a target of one name never share an entry). Here the
checks' budget is spent (0 s): a control or a mask whose PNG deflate stream ends early (Pillow
decodes it with rows black, saying nothing) passes the check and fails the run before its models
load, naming the file with its folder; with every file good, one check records them all and the
next decodes none.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.config import TrainConfig
from lorastudio.data import decoded
from lorastudio.errors import DatasetError
from lorastudio.training.loop import train
from undecodable_images import (
    chunks_of,
    idat_ends_early,
    noisy,
    png_of,
    record_full_decodes,
    train_check_output,
    webp,
)

SIZE = 32


@pytest.fixture
def full_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files (folder/name) whose every pixel the process decodes (images._full_decode)."""
    return record_full_decodes(monkeypatch, with_folder=True)


def _mask(seed: int, ends_early: bool = False) -> bytes:
    """A SIZE x SIZE grey mask of noise as PNG; `ends_early`: its deflate stream ends cleanly
    after half the rows (valid chunks and CRCs)."""
    pixels = np.random.default_rng(seed).integers(0, 255, (SIZE, SIZE), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, "L").save(buf, format="PNG")
    if not ends_early:
        return buf.getvalue()
    chunks = chunks_of(buf.getvalue())
    raw = zlib.decompress(b"".join(d for k, d in chunks if k == b"IDAT"))
    rest = [(k, d) for k, d in chunks if k != b"IDAT"]
    return png_of([rest[0], (b"IDAT", zlib.compress(raw[: len(raw) // 2])), *rest[1:]])


def _dataset(tmp_path: Path, controls: bool, masks: bool, bad: str | None = None) -> Path:
    """Two captioned noise targets (a.png, b.png), each with a control of its name in control/
    and/or a mask in masks/; `bad`: "control" or "mask" makes b's one end early."""
    data = tmp_path / "data"
    data.mkdir()
    for i, stem in enumerate("ab"):
        (data / f"{stem}.png").write_bytes(noisy("PNG", SIZE, seed=i))
        (data / f"{stem}.txt").write_text(f"noise {stem}")
        if controls:
            (data / "control").mkdir(exist_ok=True)
            ctrl = (
                idat_ends_early(SIZE) if bad == "control" and stem == "b" else noisy("PNG", SIZE, seed=10 + i)
            )
            (data / "control" / f"{stem}.png").write_bytes(ctrl)
        if masks:
            (data / "masks").mkdir(exist_ok=True)
            (data / "masks" / f"{stem}.png").write_bytes(_mask(i, ends_early=bad == "mask" and stem == "b"))
    return data


@pytest.mark.parametrize(
    ("bad", "family", "named"),
    [("control", "qwen-image-edit", "control image control/b.png"), ("mask", "flux", "masks/b.png")],
)
def test_a_control_or_mask_the_checks_left_fails_the_run_before_its_models_load(
    bad: str,
    family: str,
    named: str,
    tmp_path: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    full_decodes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 0.0)  # the checks' budget spent
    data = _dataset(tmp_path, controls=bad == "control", masks=bad == "mask", bad=bad)
    raw = run_settings(family, tiny_model(family), data, {})
    train_check_output(raw, tmp_path)  # the cheap check passes it
    assert full_decodes == []
    events: list = []
    with pytest.raises(DatasetError) as info:
        train(TrainConfig.model_validate(raw), events.append, device="cpu")
    problems = info.value.problems
    assert any(p.startswith(f"{named}: corrupt (PNG pixel data cut short") for p in problems), problems
    assert f"{named.split()[-1]}" in full_decodes
    assert not any(e.type == "model_load_started" for e in events)  # before any model loads


def test_good_controls_and_masks_are_recorded_and_not_decoded_again(
    tmp_path: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    full_decodes: list[str],
) -> None:
    data = _dataset(tmp_path, controls=True, masks=True)
    raw = run_settings("qwen-image-edit", tiny_model("qwen-image-edit"), data, {})
    train_check_output(raw, tmp_path)
    assert sorted(full_decodes) == [
        "control/a.png", "control/b.png", "data/a.png", "data/b.png", "masks/a.png", "masks/b.png",
    ]  # fmt: skip
    full_decodes.clear()
    out = train_check_output({**raw, "output_name": "again"}, tmp_path)
    assert full_decodes == []  # all recorded: the next check decodes none
    assert "not fully decoded" not in out
    (data / "control" / "b.png").write_bytes(idat_ends_early(SIZE))  # a control replaced: decoded again
    out = train_check_output(raw, tmp_path, ok=False)
    assert full_decodes == ["control/b.png"], full_decodes
    assert "control/b.png: corrupt (PNG pixel data cut short" in out, out


def test_the_checks_warning_counts_and_names_each_kind_they_left(
    tmp_path: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 0.0)  # the checks' budget spent
    data = _dataset(tmp_path, controls=True, masks=True)
    out = " ".join(
        train_check_output(
            run_settings("qwen-image-edit", tiny_model("qwen-image-edit"), data, {}), tmp_path
        ).split()
    )
    assert (
        "2 image(s), 2 control image(s) and 2 loss mask(s) not fully decoded yet "
        "(a.png, b.png; control/a.png, control/b.png; masks/a.png, masks/b.png)"
    ) in out, out
    assert "the run decodes these before its models load" in out


@pytest.mark.parametrize(
    ("kind", "family", "named"),
    [
        ("image", "flux", "b.webp"),
        ("control", "qwen-image-edit", "control image control/b.webp"),
        ("mask", "flux", "masks/b.webp"),
    ],
)
def test_a_webp_above_the_decode_budget_is_decided_before_the_models_load(
    kind: str,
    family: str,
    named: str,
    tmp_path: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A WebP counts 4x its pixels against max_decode_pixels, and Pillow decodes it at full
    size only (RELIABILITY 211): a check leaves one above the budget undecided (not recorded,
    named by the warning), and the run's scan decodes it alone before any model loads, so a
    broken one fails the run naming it (before: recorded as decoded, found by training)."""
    monkeypatch.setenv("LORASTUDIO_MAX_DECODE_PIXELS", str(SIZE * SIZE * 2))  # a 32 px PNG fits, a WebP not
    data = _dataset(tmp_path, controls=kind == "control", masks=kind == "mask")
    folder = {"image": data, "control": data / "control", "mask": data / "masks"}[kind]
    (folder / "b.png").unlink()
    (folder / "b.webp").write_bytes(webp(SIZE, seed=3, truncated=True))
    if kind == "image":
        (data / "b.txt").write_text("noise b")
    raw = run_settings(family, tiny_model(family), data, {})
    out = " ".join(train_check_output(raw, tmp_path).split())  # the header passes it; not decided
    assert "not fully decoded yet" in out and named.split()[-1] in out, out
    events: list = []
    with pytest.raises(DatasetError) as info:
        train(TrainConfig.model_validate(raw), events.append, device="cpu")
    assert any(p.startswith(f"{named}: corrupt") for p in info.value.problems), info.value.problems
    assert not any(e.type == "model_load_started" for e in events)
