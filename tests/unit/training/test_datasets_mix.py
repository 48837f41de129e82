"""Several dataset entries in one run on a tiny model (CPU): the epoch follows the entries'
repeats, an entry's loss_weight and caption_dropout change the run, one plain entry is the
data_dir run bitwise, a kohya folder trains with its repeats, and a weighted mix resumes
bitwise like an uninterrupted run."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.config import TrainConfig
from lorastudio.data import scan_dataset
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import TrainResult, train


@pytest.fixture(scope="module")
def two_folders(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """small_dataset split in two: 3 images and 1 image, each with its captions."""
    root = tmp_path_factory.mktemp("mix")
    a, b = root / "a", root / "b"
    a.mkdir()
    b.mkdir()
    images = sorted(small_dataset.glob("*.png"))
    for n, img in enumerate(images):
        to = a if n < 3 else b
        shutil.copy(img, to / img.name)
        shutil.copy(img.with_suffix(".txt"), to / f"{img.stem}.txt")
    return a, b


def _mix(make_config: Callable[..., TrainConfig], entries: list[dict], **kw: object) -> TrainConfig:
    return make_config("flux", data_dir=None, datasets=entries, **kw)


def _weights(result: TrainResult) -> dict[str, torch.Tensor]:
    assert result.lora_path is not None
    return load_file(str(result.lora_path))


def test_an_epoch_follows_the_repeats(make_config, two_folders) -> None:
    a, b = two_folders
    cfg = _mix(make_config, [{"path": str(a)}, {"path": str(b), "repeats": 5}], num_epochs=1, batch_size=1)
    result = train(cfg, [].append, device="cpu")
    assert result.steps_run == 3 + 5  # batch 1: one step per sample, 3 x 1 + 1 x 5
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    dataset = sidecar["dataset"]
    assert [(e["label"], e["images"], e["repeats"]) for e in dataset["entries"]] == [
        (str(a), 3, None),
        (str(b), 1, 5),
    ]
    own = [scan_dataset(p, resolution=32, multiple=16).fingerprint for p in (a, b)]
    assert [e["fingerprint"] for e in dataset["entries"]] == own
    assert dataset["fingerprint"] not in own and dataset["images"] == 4  # over both entries


def test_one_plain_entry_is_the_data_dir_run_and_loss_weight_changes_it(make_config, small_dataset) -> None:
    by_dir = train(make_config("flux", output_name="dir"), [].append, device="cpu")
    by_entry = train(
        _mix(make_config, [{"path": str(small_dataset)}], output_name="entry"), [].append, device="cpu"
    )
    assert by_entry.losses == by_dir.losses
    assert all(
        torch.equal(x, y) for x, y in zip(_weights(by_dir).values(), _weights(by_entry).values(), strict=True)
    )
    heavy = _mix(make_config, [{"path": str(small_dataset), "loss_weight": 3.0}], output_name="heavy")
    weighted = train(heavy, [].append, device="cpu")
    assert weighted.losses[0] == pytest.approx(3 * by_dir.losses[0], rel=1e-5)  # same draws, 3x the loss


def test_each_entry_s_loss_weight_weights_its_own_samples_only(make_config, two_folders) -> None:
    """Two entries, the second with loss_weight 3: over one epoch (batch 1, a learning rate too
    small to move the LoRA) exactly the step of b's one image has 3x the loss of the unweighted
    run, a's three steps the same loss."""
    a, b = two_folders
    kw = {"batch_size": 1, "num_epochs": 1, "learning_rate": 1e-12}
    plain = train(_mix(make_config, [{"path": str(a)}, {"path": str(b)}], output_name="lw1", **kw), [].append,
                  device="cpu")  # fmt: skip
    heavy = [{"path": str(a)}, {"path": str(b), "loss_weight": 3.0}]
    weighted = train(_mix(make_config, heavy, output_name="lw3", **kw), [].append, device="cpu")
    assert len(plain.losses) == len(weighted.losses) == 4
    ratios = sorted(round(w / p, 4) for w, p in zip(weighted.losses, plain.losses, strict=True))
    assert ratios == [1.0, 1.0, 1.0, 3.0]


def test_caption_dropout_per_entry_changes_the_run(make_config, two_folders) -> None:
    a, b = two_folders
    plain = train(
        _mix(make_config, [{"path": str(a)}, {"path": str(b)}], output_name="p"), [].append, device="cpu"
    )
    dropping = [{"path": str(a), "caption_dropout": 0.9}, {"path": str(b)}]
    dropped = train(_mix(make_config, dropping, output_name="d", steps=3), [].append, device="cpu")
    assert dropped.losses[:2] != plain.losses


def test_kohya_folders_train_with_their_repeats(make_config, small_dataset, tmp_path) -> None:
    img = tmp_path / "img"
    for name, picks in (("3_sks shape", slice(0, 2)), ("1_shape", slice(2, 4))):
        (img / name).mkdir(parents=True)
        for p in sorted(small_dataset.glob("*.png"))[picks]:
            shutil.copy(p, img / name / p.name)
    cfg = make_config("flux", data_dir=str(img), kohya_folders=True, num_epochs=1, batch_size=1)
    assert train(cfg, [].append, device="cpu").steps_run == 2 * 3 + 2 * 1
    with pytest.raises(ConfigError, match="kohya_folders"):
        train(
            _mix(make_config, [{"path": str(img), "repeats": 2}], kohya_folders=True), [].append, device="cpu"
        )


def test_a_weighted_mix_resumes_bitwise(make_config, two_folders) -> None:
    a, b = two_folders
    entries = [{"path": str(a), "weight": 1.0}, {"path": str(b), "weight": 3.0, "loss_weight": 0.5}]
    extra = {"steps": 5, "batch_size": 1, "caption_dropout": 0.3, "random_flip": True}
    full = train(_mix(make_config, entries, output_name="full", **extra), [].append, device="cpu")
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    first = train(_mix(make_config, entries, output_name="part", **extra), events.append, stop, device="cpu")
    assert first.stopped and first.losses == full.losses[:2]
    run_dir = get_settings().outputs_dir / "part"
    cfg = _mix(make_config, entries, output_name="part", **extra)
    resumed = train(cfg, [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses
    assert all(
        torch.equal(x, y) for x, y in zip(_weights(full).values(), _weights(resumed).values(), strict=True)
    )
    changed = [{"path": str(a), "weight": 2.0}, {"path": str(b), "weight": 3.0, "loss_weight": 0.25}]
    longer = {**extra, "steps": 6}  # trained longer, with other weights: refused, naming the field
    # and the entry's setting (session 36: an 80-character cut of the entries hid which one)
    said = (
        r"datasets: differs from the checkpoint \(datasets\.0\.weight: checkpoint: 1\.0, this run: 2\.0; "
        r"datasets\.1\.loss_weight: checkpoint: 0\.5, this run: 0\.25\)"
    )
    with pytest.raises(ConfigError, match=said):
        train(
            _mix(make_config, changed, output_name="part", **longer), [].append, device="cpu", resume=run_dir
        )


def test_several_resolutions_train_each_image_at_each_and_resume_bitwise(make_config) -> None:
    """resolution = [32, 48]: an epoch is every image at both (4 images -> 8 samples), the
    batches hold latents of both sizes, and a stopped run resumes as the uninterrupted one."""
    extra = {"resolution": [32, 48], "num_epochs": 1, "batch_size": 1}
    full = train(make_config("flux", output_name="multi", **extra), [].append, device="cpu")
    assert full.steps_run == 8
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 3 else None

    cfg = make_config("flux", output_name="multi-part", **extra)
    assert train(cfg, events.append, stop, device="cpu").stopped
    resumed = train(cfg, [].append, device="cpu", resume=get_settings().outputs_dir / "multi-part")
    assert resumed.losses == full.losses
    assert all(
        torch.equal(x, y) for x, y in zip(_weights(full).values(), _weights(resumed).values(), strict=True)
    )
    single = train(
        make_config("flux", output_name="single", resolution=32, num_epochs=1, batch_size=1),
        [].append,
        device="cpu",
    )
    assert single.steps_run == 4


def test_entries_with_two_resolutions_a_validation_split_and_masks_train(
    make_config, two_folders, tmp_path
) -> None:
    """Entries with main's run features: entry a's masks/ folder masks its images only, 0.34 of each
    entry is held out with both copies of a held image (resolution [32, 48]), the held images are
    never trained on, and the sidecar counts images once."""
    from PIL import Image

    from lorastudio.training.preflight import preflight

    a, b = (tmp_path / "a", tmp_path / "b")
    shutil.copytree(two_folders[0], a)
    shutil.copytree(two_folders[1], b)
    (a / "masks").mkdir()
    for img in sorted(a.glob("*.png")):
        with Image.open(img) as im:
            Image.new("L", im.size, 255).save(a / "masks" / img.name)
    cfg = _mix(
        make_config,
        [{"path": str(a)}, {"path": str(b), "repeats": 2}],
        output_name="entries-val-masks",
        resolution=[32, 48],
        validation_split=0.34,
        unmasked_weight=0.0,
        num_epochs=1,
        batch_size=1,
    )
    run = preflight(cfg, get_settings(), "cpu")
    held = {(it.entry, it.path.name) for it in run.validation}
    assert [e for e, _ in sorted(held)] == [0]  # 1 of a's 3; b (1 image) is too small to split
    assert len(run.validation) == 2 and {it.resolution for it in run.validation} == {32, 48}
    trained = {(it.entry, it.path.name) for it in run.scan.items}
    assert not held & trained and len(run.scan.items) == 2 * 2 + 2  # a: 2 images, b: 1, each at 2 sides
    assert all((it.mask is not None) == (it.entry == 0) for it in run.scan.items)
    events: list = []
    result = train(cfg, events.append, device="cpu")
    assert result.steps_run == 2 * 2 + 2 * 2  # a x1 at 2 sides, b x2 at 2 sides
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    dataset = sidecar["dataset"]
    assert (dataset["images"], dataset["masked_images"], dataset["validation_images"]) == (3, 2, 1)
    # the held image is one image (at two sides), named with its entry as the preflight names it
    assert [e.images for e in events if e.type == "validation"] == [1]
    (name,) = {it.path.name for it in run.validation}
    assert sidecar["validation"]["images"] == [f"{run.scan.entries[0].label}/{name}"]
