"""What the upgrade tests share: the source tree of an older commit (`git archive` of its src/
into a folder, skipping the test where the clone lacks the commit: a shallow CI clone) and the
check that an old home's gallery images render again the same and its stopped runs resume
bitwise."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]


def old_src(commit: str, out: Path) -> Path:
    """`commit`'s src/ extracted under `out`; returns the src folder (for PYTHONPATH)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "src"], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"commit {commit} not in this clone: {archive.stderr.decode()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(out, filter="data")
    return out / "src"


def renders_again(client: Any, gallery: list[dict]) -> None:
    """Each gallery image an old home's fixture made (its request `body`, its answer `out`) is
    generated again through `client` (the app's TestClient) to the same pixels."""
    for made in gallery:
        again = client.post("/api/generate", json=made["body"])
        assert again.status_code == 201, again.text
        pixels = [
            np.asarray(Image.open(io.BytesIO(client.get(u).content)))
            for u in (made["out"]["url"], again.json()["url"])
        ]
        np.testing.assert_array_equal(*pixels)


def resumes_bitwise(home: Path, runs: dict, names: tuple[str, ...]) -> None:
    """Each stopped run `names` of an old home (its fixture's `raw` config and `full_losses`, the
    old code's uninterrupted run) resumed by this code to the same losses, bit for bit."""
    from lorastudio.config import TrainConfig
    from lorastudio.training.loop import train

    for name in names:
        resumed = train(
            TrainConfig.model_validate(runs[name]["raw"]),
            [].append,
            device="cpu",
            resume=home / "outputs" / name,
        )
        assert resumed.losses == runs[name]["full_losses"], name
