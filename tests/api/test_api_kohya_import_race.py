"""`lorastudio datasets import --kohya` claims the datasets it creates for writing, as a plain
import, an upload and a caption job do (jobs/dataset_claims.py): raced mid-import (its first
dataset's files in, its masks and second dataset still to come) by an API delete and upload and by
a second import of the same names in another process, each is refused naming the import, and the
import completes whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import typer
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

import lorastudio.data.mask_import as mask_import
from lorastudio.settings import Settings


def _kohya_source(tmp_path: Path) -> Path:
    src = tmp_path / "img"
    for folder, colours in (("10_sks ball", ("red", "blue")), ("3_ball", ("green",))):
        (src / folder).mkdir(parents=True)
        for i, colour in enumerate(colours):
            Image.new("RGB", (32, 32), colour).save(src / folder / f"{colour}.png")
            (src / folder / f"{colour}.txt").write_text(f"a {colour} ball {i}")
    return src


def test_a_kohya_import_is_not_raced_by_a_delete_an_upload_or_another_import(
    cli: typer.Typer, client: TestClient, settings: Settings, tmp_path: Path, monkeypatch
) -> None:
    src = _kohya_source(tmp_path)
    first, second = "balls-10_sks ball", "balls-3_ball"
    seen: dict[str, Any] = {}
    real_copy_masks = mask_import.copy_masks

    def racing(plan: Any, target: Path, *args: Any, **kwargs: Any) -> Any:
        if not seen:  # the first dataset's files are committed; the import is not done
            assert target.name == first and (target / "red.png").is_file()
            seen["delete"] = client.delete(f"/api/datasets/{first}")
            png = (src / "3_ball" / "green.png").read_bytes()
            seen["upload"] = client.post(
                f"/api/datasets/{second}/files", files=[("files", ("x.png", png, "image/png"))]
            )
            seen["import"] = subprocess.run(  # another process importing the same names
                [
                    sys.executable,
                    "-m",
                    "lorastudio.cli",
                    "datasets",
                    "import",
                    str(src),
                    "--name",
                    "balls",
                    "--kohya",
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
        return real_copy_masks(plan, target, *args, **kwargs)

    monkeypatch.setattr(mask_import, "copy_masks", racing)
    args = ["datasets", "import", str(src), "--name", "balls", "--kohya"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output

    holder = "`lorastudio datasets import --kohya` into balls-10_sks ball, balls-3_ball"
    assert seen["delete"].status_code == 409, seen["delete"].text
    assert holder in seen["delete"].text
    assert seen["upload"].status_code == 409, seen["upload"].text
    assert holder in seen["upload"].text
    other = seen["import"]
    assert other.returncode != 0 and holder in other.stdout + other.stderr, other.stdout + other.stderr
    # the import is whole: both datasets, every image and caption row, nothing of the racers
    assert sorted(p.name for p in (settings.datasets_dir / first).iterdir()) == [
        "blue.png",
        "metadata.jsonl",
        "red.png",
    ]
    assert sorted(p.name for p in (settings.datasets_dir / second).iterdir()) == [
        "green.png",
        "metadata.jsonl",
    ]
    assert "dataset balls-3_ball: 1 image(s), 1 captioned" in result.output
    assert not (settings.home / "claims").exists() or not any((settings.home / "claims").iterdir())
