"""The source tree of an older commit, for the upgrade tests: `git archive` of its src/ into a
folder (skipping the test where the clone lacks the commit, a shallow CI clone)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def old_src(commit: str, out: Path) -> Path:
    """`commit`'s src/ extracted under `out`; returns the src folder (for PYTHONPATH)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "src"], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"commit {commit} not in this clone: {archive.stderr.decode()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(out, filter="data")
    return out / "src"
