"""bench/sample_rounds.py on the CPU with lorastudio.tiny's FLUX.1: one run through train() with a
round every few steps; the row has each interval's pace, the state around every round, and with
`--checkpoints` a checkpoint written at each round (the variant that tells note 31's lead)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import e2e_build, sample_rounds


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rounds")
    e2e_build.build_tiny(folder, "flux")
    return folder


@pytest.mark.slow  # ~30 s on 2 shared cores: a tiny build and a 16-step run with two rounds
def test_rounds_are_timed_and_checkpointed(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LORASTUDIO_HOME", str(e2e_build.home_dir(root)))
    from lorastudio.settings import get_settings

    get_settings.cache_clear()
    row = sample_rounds.run(
        root, steps=16, every=8, empty_cache=False, resolution=32, attention="auto", checkpoints=True
    )
    assert [r["step"] for r in row["rounds"]] == [8, 16]
    assert all(r["seconds"] > 0 and "segments" in r["before"] for r in row["rounds"])
    assert [i["steps"] for i in row["intervals"]] == ["1-8", "8-16"]
    assert all(i["n"] > 0 and i["median_s"] > 0 for i in row["intervals"])
    assert row["checkpoints"] and row["compiles_at"] == []  # the CPU run compiles nothing
    ckpts = sorted(
        p.name
        for p in (e2e_build.home_dir(root) / "outputs" / "sample-rounds-plain-ckpt" / "checkpoints").iterdir()
    )
    assert len(ckpts) >= 1
