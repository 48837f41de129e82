"""Attacks on `lorastudio datasets import` (and the masks/ it brings, data/mask_import.py): an
import into a dataset a run reads, odd file names in the source folder, masks that clash."""

from __future__ import annotations

from pathlib import Path

import typer
from PIL import Image
from typer.testing import CliRunner

from lorastudio.errors import DatasetBusy
from lorastudio.jobs.dataset_claims import READ, DatasetClaim
from lorastudio.settings import Settings


def _source(tmp_path: Path, stems: tuple[str, ...] = ("a",)) -> Path:
    src = tmp_path / "src"
    (src / "masks").mkdir(parents=True)
    for stem in stems:
        Image.new("RGB", (32, 32), "red").save(src / f"{stem}.png")
        Image.new("L", (32, 32), 255).save(src / "masks" / f"{stem}.png")
    return src


def test_an_import_into_a_dataset_a_run_reads_is_refused_writing_nothing(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """The import wrote images, captions and masks into a dataset while a `lorastudio train`
    (or a server run) read it, without its write claim (every other writer takes it)."""
    dataset = settings.datasets_dir / "set"
    dataset.mkdir(parents=True)
    Image.new("RGB", (32, 32), "blue").save(dataset / "old.png")
    src = _source(tmp_path)
    (src / "old.txt").write_text("a caption the run would read half-way")
    with DatasetClaim.take(settings.home, settings.datasets_dir, [dataset], READ, "`lorastudio train`"):
        busy = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set"])
        assert isinstance(busy.exception, DatasetBusy), busy.output
        assert "`lorastudio train`" in str(busy.exception.args) + str(busy.exception)
        assert sorted(p.name for p in dataset.iterdir()) == ["old.png"]
    done = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set"])
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in dataset.iterdir()) == ["a.png", "masks", "old.png", "old.txt"]
    with DatasetClaim.take(settings.home, settings.datasets_dir, [dataset], READ, "a run"):
        pass  # the import let go of its claim
