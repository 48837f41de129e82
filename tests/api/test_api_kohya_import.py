"""`lorastudio datasets import DIR --kohya`: a kohya `img/10_sks ball/` folder (which a plain
import or upload does not read) becomes one dataset whose metadata.jsonl records each image's
caption and repeats, and which a training preflight accepts."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from PIL import Image
from typer.testing import CliRunner

from lorastudio.data import scan_dataset
from lorastudio.settings import Settings


def test_a_kohya_folder_imports_as_a_dataset_with_repeats(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    src = tmp_path / "img"
    (src / "10_sks ball").mkdir(parents=True)
    (src / "3_ball").mkdir()
    Image.new("RGB", (32, 32), "red").save(src / "10_sks ball" / "a.png")
    (src / "10_sks ball" / "a.txt").write_text("a red sks ball")
    Image.new("RGB", (32, 32), "blue").save(src / "10_sks ball" / "b.png")
    Image.new("RGB", (32, 32), "green").save(src / "3_ball" / "c.png")
    (src / "3_ball" / "broken.png").write_bytes(b"not a png")
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "balls", "--kohya"])
    assert result.exit_code == 0, result.output
    assert "from 2 kohya folder(s)" in result.output and "3 image(s), 3 captioned" in result.output
    assert "skipped 3_ball/broken.png: " in result.output
    folder = settings.datasets_dir / "balls"
    assert sorted(p.name for p in folder.iterdir()) == ["a.png", "b.png", "c.png", "metadata.jsonl"]
    rows = {r["file_name"]: r for r in map(json.loads, (folder / "metadata.jsonl").read_text().splitlines())}
    assert (rows["a.png"]["text"], rows["a.png"]["repeats"]) == ("a red sks ball", 10)
    assert (rows["b.png"]["text"], rows["c.png"]["text"], rows["c.png"]["repeats"]) == ("sks ball", "ball", 3)
    scan = scan_dataset(folder, resolution=32, multiple=16)
    assert sorted(i.caption for i in scan.items) == ["a red sks ball", "ball", "sks ball"]
    assert scan.dropped == []  # no row without its image

    again = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "balls", "--kohya"])
    assert again.exit_code != 0 and "already exists" in str(again.exception)
