"""What the training loop really draws (tiny FLUX.1, CPU), counted from inside a real run through a
hook on the step's per-sample loss weights: with two entries of different repeats and a
regularisation entry, every epoch draws each image exactly its entry's repeats times, and each
regularisation sample's loss carries prior_loss_weight (the others 1), its caption without the
run's trigger word."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from lorastudio.training import optimize
from lorastudio.training.events import Progress
from lorastudio.training.loop import train


@pytest.fixture(scope="module")
def three_folders(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """small_dataset's 4 images over three folders: 2 subject, 1 style, 1 class (regularisation)."""
    root = tmp_path_factory.mktemp("draws")
    images = sorted(small_dataset.glob("*.png"))
    folders = [root / "subject", root / "style", root / "class"]
    for folder, chosen in zip(folders, (images[:2], images[2:3], images[3:]), strict=True):
        folder.mkdir()
        for img in chosen:
            shutil.copy(img, folder / img.name)
            shutil.copy(img.with_suffix(".txt"), folder / f"{img.stem}.txt")
    return folders


def test_each_epoch_draws_every_image_its_repeats_and_weights_the_prior_loss(
    make_config, three_folders, monkeypatch
) -> None:
    subject, style, klass = three_folders
    drawn: list[tuple[str, float, str]] = []  # (entry folder / file, loss weight, caption) per sample
    real = optimize.entry_loss_weights

    def record(scan, indices):
        weights = real(scan, indices)
        for n, i in enumerate(indices):
            item = scan.items[i]
            weight = 1.0 if weights is None else float(weights[n])
            drawn.append((f"{item.path.parent.name}/{item.path.name}", weight, item.caption))
        return weights

    monkeypatch.setattr(optimize, "entry_loss_weights", record)
    entries = [
        {"path": str(subject), "repeats": 3},
        {"path": str(style), "repeats": 2},
        {"path": str(klass), "repeats": 1, "regularisation": True},
    ]
    per_epoch = 3 * 2 + 2 * 1 + 1 * 1
    events: list = []
    cfg = make_config(
        "flux",
        data_dir=None,
        datasets=entries,
        trigger_word="sks",
        prior_loss_weight=2.5,
        batch_size=1,
        steps=2 * per_epoch,
        seed=5,
    )
    train(cfg, events.append, device="cpu")

    epochs = [e.epoch for e in events if isinstance(e, Progress)]
    assert len(drawn) == len(epochs) == 2 * per_epoch
    for epoch in (1, 2):
        counts = Counter(name for (name, _, _), e in zip(drawn, epochs, strict=True) if e == epoch)
        wanted = {
            f"{f.name}/{p.name}": r
            for f, r in ((subject, 3), (style, 2), (klass, 1))
            for p in f.glob("*.png")
        }
        assert counts == wanted
    for name, weight, caption in drawn:
        regularisation = name.startswith("class/")
        assert weight == (2.5 if regularisation else 1.0)
        assert caption.startswith("sks") != regularisation
