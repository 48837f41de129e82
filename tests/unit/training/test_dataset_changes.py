"""The dataset changing under a run (tiny FLUX.1, CPU): an image, control image or mask replaced
or edited after the run scanned it is never trained on silently; the run fails naming it. A
caption edited after the scan does not reach the run (captions are encoded from the scan),
touching a file without changing its bytes changes nothing, and a resume onto a changed dataset
is refused naming what changed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data.masks import attach_masks
from lorastudio.data.scan import scan_dataset
from lorastudio.errors import ConfigError, DatasetError
from lorastudio.settings import get_settings
from lorastudio.training.events import Preparing, Progress, StopRequest
from lorastudio.training.loop import train


def _copy(small_dataset: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    return data


def _replace(image: Path) -> None:
    """Another picture of the same size under the same name, written as editors save: a new
    file renamed over the old one."""
    size = Image.open(image).size
    staging = image.with_name(f".{image.name}.tmp")
    noise = np.random.default_rng(7).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(noise).save(staging, format="PNG")
    os.replace(staging, image)


def _edit_in_place(image: Path) -> None:
    """The same file (same inode) rewritten with other pixels, as `convert x.png x.png` does."""
    with Image.open(image) as img:
        flipped = img.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    flipped.save(image, format="PNG")


def _when(event_type: type, phase: str | None, action: Callable[[], None]) -> Callable[[object], None]:
    """An emit hook running `action` once, at the first event of `event_type` (and `phase`)."""
    done = []

    def emit(event: object) -> None:
        if not done and isinstance(event, event_type) and getattr(event, "phase", phase) == phase:
            done.append(True)
            action()

    return emit


@pytest.mark.parametrize("change", [_replace, _edit_in_place])
def test_an_image_changed_after_the_scan_fails_the_run_naming_it(
    make_config, small_dataset, tmp_path, change
):
    data = _copy(small_dataset, tmp_path)
    image = sorted(data.glob("*.png"))[1]
    emit = _when(Preparing, "conditioning", lambda: change(image))  # after the scan, before latents
    with pytest.raises(DatasetError) as err:
        train(make_config(steps=2, data_dir=str(data)), emit, device="cpu")
    (problem,) = err.value.problems
    assert problem.startswith(f"{image.name}: changed since the run scanned the dataset")


def test_an_image_changed_mid_run_is_caught_at_its_next_encode(make_config, small_dataset, tmp_path):
    """latent_cache "off": every step decodes its images; one replaced after step 1 is refused."""
    data = _copy(small_dataset, tmp_path)
    images = sorted(data.glob("*.png"))
    emit = _when(Progress, None, lambda: [_replace(p) for p in images])
    cfg = make_config(steps=6, data_dir=str(data), latent_cache="off")
    with pytest.raises(DatasetError, match="changed since the run scanned the dataset"):
        train(cfg, emit, device="cpu")


def test_untouched_bytes_and_caption_edits_after_the_scan_change_nothing(
    make_config, small_dataset, tmp_path
):
    data = _copy(small_dataset, tmp_path)
    plain = train(make_config(steps=3, data_dir=str(data), output_name="plain"), [].append, device="cpu")

    def touch_and_recaption() -> None:
        for image in data.glob("*.png"):
            os.utime(image, ns=(1, 1))  # new mtime and ctime, same bytes
        for caption in data.glob("*.txt"):
            caption.write_text("an entirely different caption\n")

    emit = _when(Preparing, "conditioning", touch_and_recaption)
    later = train(make_config(steps=3, data_dir=str(data), output_name="later"), emit, device="cpu")
    assert later.losses == plain.losses  # the captions and images the scan read, bitwise


def test_a_control_image_changed_after_the_scan_fails_the_run_naming_it(make_config, small_pairs, tmp_path):
    data = tmp_path / "pairs"
    shutil.copytree(small_pairs, data)
    control = sorted((data / "control").glob("*.png"))[0]
    emit = _when(Preparing, "conditioning", lambda: _replace(control))
    with pytest.raises(DatasetError) as err:
        train(make_config("flux-kontext", steps=2, data_dir=str(data)), emit, device="cpu")
    (problem,) = err.value.problems
    assert problem.startswith(f"{control.name}: changed since the run scanned the dataset")


def test_a_resume_onto_a_changed_dataset_says_what_changed(make_config, small_dataset, tmp_path):
    data = _copy(small_dataset, tmp_path)
    events: list = []

    def stop() -> StopRequest | None:
        return StopRequest(save=True) if any(isinstance(e, Progress) for e in events) else None

    train(make_config(steps=4, data_dir=str(data), output_name="changing"), events.append, stop, device="cpu")
    images = sorted(data.glob("*.png"))
    _replace(images[0])
    images[1].with_suffix(".txt").write_text("an edited caption\n")
    images[2].unlink()
    images[2].with_suffix(".txt").unlink()
    shutil.copy(images[3], data / "new.png")
    (data / "new.txt").write_text("a new image\n")
    with pytest.raises(ConfigError) as err:
        train(
            make_config(steps=4, data_dir=str(data), output_name="changing"),
            [].append,
            device="cpu",
            resume=get_settings().outputs_dir / "changing",
        )
    (problem,) = err.value.problems
    assert problem.field == "dataset_fingerprint"
    assert problem.message == (
        "the dataset differs from the one the checkpoint trained on: "
        f"image changed: {images[0].name}; caption changed: {images[1].name}; "
        f"removed: {images[2].name}; added: new.png; resume on the dataset as it was, or start a new run"
    )


def test_a_mask_changed_after_the_scan_fails_the_run_naming_it(make_config, small_dataset, tmp_path):
    data = _copy(small_dataset, tmp_path)
    (data / "masks").mkdir()
    for image in sorted(data.glob("*.png")):
        size = Image.open(image).size
        Image.new("L", size, 255).save(data / "masks" / image.name)
    mask = sorted((data / "masks").glob("*.png"))[1]

    def repaint() -> None:
        Image.new("L", Image.open(mask).size, 0).save(mask)

    emit = _when(Preparing, "conditioning", repaint)
    with pytest.raises(DatasetError) as err:
        train(make_config(steps=2, data_dir=str(data)), emit, device="cpu")
    (problem,) = err.value.problems
    assert problem.startswith(f"{mask.name}: changed since the run scanned the dataset")


def test_a_mask_with_a_colour_profile_is_not_colour_managed(tmp_path):
    """A mask is data, not colour: an editor's profile on it is neither applied nor refused."""
    Image.new("RGB", (32, 32), (10, 20, 30)).save(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "masks").mkdir()
    Image.new("L", (32, 32), 128).save(tmp_path / "masks" / "a.png", icc_profile=b"an editor's odd bytes" * 8)
    scan = attach_masks(scan_dataset(tmp_path, resolution=32, multiple=16), alpha_mask=False)
    assert scan.items[0].mask is not None


def test_a_resume_onto_a_changed_control_names_the_control_not_the_image(small_pairs, tmp_path):
    """A control image replaced between a paired run's checkpoint and its resume was told as
    "image changed: a.png", the target the user then finds unchanged. The record keeps the
    target's own digest beside its-and-its-controls', so the change is told as the controls';
    a record written before (two digests) still reads as the image's."""
    from lorastudio.training.resume.identity import dataset_change, dataset_files

    data = tmp_path / "pairs"
    shutil.copytree(small_pairs, data)

    def files() -> dict[str, list[str]]:
        return dataset_files(scan_dataset(data, resolution=32, multiple=16, control_images=(0, 1)))

    before = files()
    control = sorted((data / "control").glob("*.png"))[0]
    _replace(control)
    after = files()
    said = dataset_change(before, after)
    assert f"control images changed (their targets): {control.name};" in said and "image changed" not in said
    target = data / control.name
    _replace(target)
    assert f"image changed: {control.name};" in dataset_change(before, files())
    old = {name: digests[:2] for name, digests in before.items()}  # a checkpoint from before
    assert f"image changed: {control.name};" in dataset_change(old, after)


def test_a_resume_onto_changed_masks_names_each_mask_change(make_config, small_dataset, tmp_path):
    """A mask edited, added or removed between a run's checkpoint and its resume was refused as
    "its settings changed" (dataset_files held no mask digest), naming no file: the user was
    sent looking at the settings. Each is now named; a record from before (three digests per
    image) still says "its settings changed" (nothing else to say)."""
    from lorastudio.training.resume.identity import dataset_change

    data = _copy(small_dataset, tmp_path)
    (data / "masks").mkdir()
    images = sorted(data.glob("*.png"))
    for image in images[:3]:
        Image.new("L", Image.open(image).size, 200).save(data / "masks" / image.name)
    events: list = []

    def stop() -> StopRequest | None:
        return StopRequest(save=True) if any(isinstance(e, Progress) for e in events) else None

    train(make_config(steps=4, data_dir=str(data), output_name="masked"), events.append, stop, device="cpu")
    Image.new("L", Image.open(images[0]).size, 10).save(data / "masks" / images[0].name)  # edited
    (data / "masks" / images[1].name).unlink()  # removed
    Image.new("L", Image.open(images[3]).size, 90).save(data / "masks" / images[3].name)  # added
    run_dir = get_settings().outputs_dir / "masked"
    with pytest.raises(ConfigError) as err:
        train(
            make_config(steps=4, data_dir=str(data), output_name="masked"),
            [].append,
            device="cpu",
            resume=run_dir,
        )
    (problem,) = err.value.problems
    assert problem.field == "dataset_fingerprint"
    assert problem.message == (
        "the dataset differs from the one the checkpoint trained on: "
        f"mask added: {images[3].name}; mask removed: {images[1].name}; mask changed: {images[0].name}; "
        "resume on the dataset as it was, or start a new run"
    )
    old = {name: ["a", "b", "c"] for name in ("x.png", "y.png")}
    assert "its settings changed" in dataset_change(old, old)
