"""Captioning a dataset with the tiny random Qwen2.5-VL: which files get captions, prefix,
determinism, a broken image, a stop between images, the CLI's lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.run import caption_dataset
from lorastudio.captioning.source import resolve_captioner
from lorastudio.settings import get_settings


def _run(folder: Path, vlm: Path, **opts: Any) -> tuple[Any, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    cancel_after = opts.pop("cancel_after", None)

    def cancelled() -> bool:
        return (
            cancel_after is not None and sum(e["type"] == "caption_progress" for e in events) >= cancel_after
        )

    options = CaptionOptions(model=str(vlm), max_tokens=6, device="cpu", **opts)
    source = resolve_captioner(get_settings(), options.model)
    return caption_dataset(folder, source, options, events.append, cancelled), events


def _captions(folder: Path) -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))}


def test_uncaptioned_only_prefix_broken_image(tiny_vlm: Path, make_dataset: Callable[..., Path]) -> None:
    folder = make_dataset(captions={"red": "a red card"}, broken=True)
    summary, events = _run(folder, tiny_vlm, prefix="sks")
    captions = _captions(folder)
    assert captions["red"] == "a red card\n"  # kept
    assert set(captions) == {"red", "green", "blue", "white"}  # no caption for the broken file
    for stem in ("green", "blue", "white"):
        assert captions[stem].startswith("sks, ") and len(captions[stem]) > len("sks, \n")
    assert [f for f, _ in summary.captioned] == ["blue.png", "green.png", "white.png"]
    assert summary.skipped == ["red.png"]
    assert [f for f, _ in summary.failures] == ["broken.png"] and "corrupt" in summary.failures[0][1]
    kinds = [e["type"] for e in events]
    progress, failed = "caption_progress", "caption_failed"  # by name: blue, broken, green, white
    assert kinds == ["caption_started", progress, failed, progress, progress, "caption_summary"]
    assert events[0]["total"] == 4 and events[0]["skipped"] == 1
    assert events[-1]["failures"] == [{"file": "broken.png", "reason": summary.failures[0][1]}]


def test_overwrite_and_deterministic(tiny_vlm: Path, make_dataset: Callable[..., Path]) -> None:
    first = make_dataset(captions={"red": "a red card"}, name="one")
    second = make_dataset(name="two")
    _run(first, tiny_vlm, overwrite=True)
    _run(second, tiny_vlm, overwrite=True)
    assert _captions(first) == _captions(second)  # greedy: same model, same images, same captions
    assert len(_captions(first)) == 4 and _captions(first)["red"] != "a red card\n"


def test_stop_between_images_leaves_whole_files(tiny_vlm: Path, make_dataset: Callable[..., Path]) -> None:
    folder = make_dataset()
    summary, events = _run(folder, tiny_vlm, cancel_after=1)
    assert summary.cancelled and len(summary.captioned) == 1
    assert set(_captions(folder)) == {"blue"}
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no staged leftovers
    assert events[-1]["cancelled"] is True


def test_cli_caption(tiny_vlm: Path) -> None:
    from PIL import Image

    from lorastudio.cli.app import _register, app

    settings = get_settings().ensure_dirs()
    folder = settings.datasets_dir / "cli"
    folder.mkdir()
    Image.new("RGB", (64, 64), (10, 200, 10)).save(folder / "a.png")
    Image.new("RGB", (64, 64), (200, 10, 10)).save(folder / "b.png")
    (folder / "b.txt").write_text("mine\n", encoding="utf-8")
    (folder / "c.png").write_bytes(b"broken")
    if not app.registered_commands:
        _register()
    result = CliRunner().invoke(
        app, ["datasets", "caption", "cli", "--model", str(tiny_vlm), "--prefix", "zzq", "--max-tokens", "5"]
    )
    lines = result.output.splitlines()
    assert result.exit_code == 1, result.output  # an image failed
    assert lines[0].startswith("captioning 2 image(s) on ") and lines[0].endswith("1 already captioned")
    assert lines[1].startswith("[1/2] a.png: zzq, ")
    assert lines[2].startswith("[2/2] c.png: FAILED: corrupt")
    assert lines[3] == "done: 1 captioned, 1 skipped, 1 failed"
    assert lines[4].startswith("  failed c.png: corrupt")
    assert (folder / "a.txt").read_text(encoding="utf-8").startswith("zzq, ")


def test_florence2_native_captions(tiny_florence: Path, make_dataset: Callable[..., Path]) -> None:
    first, second = make_dataset(name="one"), make_dataset(name="two")
    assert resolve_captioner(get_settings(), str(tiny_florence)).kind == "florence2"
    summary, events = _run(first, tiny_florence, prefix="zzq")  # the default prompt: the <CAPTION> task
    _run(second, tiny_florence, prefix="zzq")
    assert len(summary.captioned) == 4 and not summary.failures
    assert _captions(first) == _captions(second)
    assert all(text.startswith("zzq, ") and len(text) > len("zzq, \n") for text in _captions(first).values())
    with pytest.raises(ValueError, match="only content in the prompt"):  # Florence-2's own prompt rule
        from lorastudio.captioning.vlm import Captioner

        Captioner(resolve_captioner(get_settings(), str(tiny_florence)), "cpu").caption(
            Image.new("RGB", (32, 32)), "<CAPTION> of a dog", 4
        )


def test_tiny_vlm_command(tmp_path: Path) -> None:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    result = CliRunner().invoke(app, ["tiny", "vlm", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == str(tmp_path / "v")
    assert resolve_captioner(get_settings(), str(tmp_path / "v")).kind == "qwen2_5_vl"
    again = CliRunner().invoke(app, ["tiny", "vlm", str(tmp_path / "v"), "--florence"])
    assert again.exit_code != 0 and "is not the tiny florence2 VLM" in again.output + str(again.exception)


def test_cli_refused_while_a_server_owns_the_home(tiny_vlm: Path) -> None:
    from lorastudio.cli.app import _register, app
    from lorastudio.jobs.homelock import HomeLock

    if not app.registered_commands:
        _register()
    settings = get_settings().ensure_dirs()
    (settings.datasets_dir / "busy").mkdir()
    Image.new("RGB", (32, 32)).save(settings.datasets_dir / "busy" / "a.png")
    with HomeLock.for_server(settings.home, 7860):
        result = CliRunner().invoke(app, ["datasets", "caption", "busy", "--model", str(tiny_vlm)])
    assert result.exit_code == 1 and "dataset busy not captioned" in result.output
    assert not (settings.datasets_dir / "busy" / "a.txt").exists()


def test_the_worker_uses_exactly_the_gpu_it_was_placed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """pick_device (what Captioner loads onto): the placed index as cuda:N, refused when this
    process does not see it; no index keeps "cuda"; the CPU ignores it (a CPU host sees no GPU)."""
    import torch

    from lorastudio.captioning.vlm import pick_device
    from lorastudio.errors import ModelSourceError

    assert pick_device("cpu", 1) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert (pick_device("cuda", 1), pick_device("auto", 0), pick_device("cuda")) == (
        "cuda:1",
        "cuda:0",
        "cuda",
    )
    with pytest.raises(ModelSourceError, match="placed on GPU 2 but this process sees 2 GPU"):
        pick_device("cuda", 2)


def test_no_replacement_characters_and_no_images_a_run_refuses(
    tiny_vlm: Path, make_dataset: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte-level tokenizer's output cut inside a character (max_tokens) or holding an invalid
    byte sequence decodes to U+FFFD: such a character is no text of the image and never reaches a
    caption file (the tiny model's raw text at 20 tokens holds some, asserted). An image every run
    refuses (larger than max_image_pixels, animated) is named in the failures with the run's
    reason and gets no caption: the captioner decoded it whole (any size Pillow takes) and
    captioned an animation's first frame. One model load for both (the suite's time)."""
    from lorastudio.captioning.vlm import Captioner

    folder = make_dataset()  # red 80x48, blue 88x48, green and white 96x48 (4608 px)
    frames = [Image.new("RGB", (32, 32), c) for c in ((200, 0, 0), (0, 0, 200))]
    frames[0].save(folder / "anim.webp", save_all=True, append_images=frames[1:], duration=100)
    raw: list[str] = []
    model_text = Captioner.caption

    def spy(self: Captioner, *args: Any) -> str:
        raw.append(model_text(self, *args))
        return raw[-1]

    monkeypatch.setattr(Captioner, "caption", spy)
    options = CaptionOptions(model=str(tiny_vlm), max_tokens=20, device="cpu")
    source = resolve_captioner(get_settings(), options.model)
    summary = caption_dataset(folder, source, options, lambda e: None, max_image_pixels=4300)
    assert [f for f, _ in summary.captioned] == ["blue.png", "red.png"]
    reasons = dict(summary.failures)
    assert sorted(reasons) == ["anim.webp", "green.png", "white.png"], reasons
    assert "animated" in reasons["anim.webp"] and "oversized" in reasons["green.png"], reasons
    written = _captions(folder)
    assert sorted(written) == ["blue", "red"] and len(raw) == 2
    assert any("\ufffd" in text for text in raw), raw
    assert not any("\ufffd" in text for text in written.values()), written
    assert all(text.strip() for text in written.values())
