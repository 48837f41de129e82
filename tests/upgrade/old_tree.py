"""What the upgrade tests share: the source tree of an older commit (`git archive` of its src/
into a folder, skipping the test where the clone lacks the commit: a shallow CI clone) and the
check that an old home's gallery images render again the same and its stopped runs resume
bitwise."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
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


def build_old_home(
    root: Path, commit: str, builder: str, preexec: Callable[[], None] | None = None
) -> tuple[Path, dict, Path]:
    """(home, the builder's facts, the old source): the old code of `commit` extracted under
    `root` and its home built there by tests/upgrade/`builder` (its facts: root/old_home.json)."""
    source = old_src(commit, root / "old")
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{here}", "OMP_NUM_THREADS": "1"}
    built = subprocess.run(
        [sys.executable, str(here / builder), str(root / "home")],
        env=env, capture_output=True, text=True, cwd=root, preexec_fn=preexec,  # noqa: PLW1509
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return root / "home", json.loads((root / "old_home.json").read_text()), source


def cli_env(src: Path) -> dict[str, str]:
    """The environment of a CLI of source tree `src` (offline, one thread)."""
    return {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def run_cli(*args: str, src: Path, preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    """`lorastudio ARGS` of source tree `src` on the home LORASTUDIO_HOME names."""
    return subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", *args],
        env=cli_env(src), capture_output=True, text=True, preexec_fn=preexec,  # noqa: PLW1509
    )  # fmt: skip


def use_old_home(
    old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict, Path]:
    """`old_home` as this process's studio home (no standby worker); returns it."""
    from lorastudio.settings import get_settings

    monkeypatch.setenv("LORASTUDIO_HOME", str(old_home[0]))
    monkeypatch.setenv("LORASTUDIO_STANDBY_WORKER", "0")
    get_settings.cache_clear()
    return old_home


def spawn_cli_train(config: Path, src: Path) -> subprocess.Popen:
    """`lorastudio train CONFIG --device cpu` of source tree `src`, its output discarded (a run a
    test kills)."""
    return subprocess.Popen(
        [sys.executable, "-m", "lorastudio.cli", "train", str(config), "--device", "cpu"],
        env=cli_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
