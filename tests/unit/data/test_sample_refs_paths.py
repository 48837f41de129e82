"""A sample prompt's `controls` that no path can follow (RELIABILITY 1581): a NUL character, a
link loop, a name over the file system's limit are the prompt's problem, named with it, like a
missing file; they raised ValueError / RuntimeError / OSError out of the run's checks."""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image

from lorastudio.config_samples import SamplePrompt
from lorastudio.data import scan_dataset
from lorastudio.data.sample_refs import sample_references


def test_controls_no_path_can_follow_are_named_problems(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    Image.new("RGB", (64, 64), "red").save(root / "a.png")
    (root / "a.txt").write_text("x")
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    scan = scan_dataset(root, resolution=64, multiple=16)
    asked = ["a\x00b.png", "loop1", "x" * 300 + ".png", "a/" * 2100 + "b.png", "a.png"]
    prompts = [SamplePrompt(prompt="p", controls=[name]) for name in asked]
    found, problems = sample_references(prompts, scan, (0, 1), family="flux-kontext", max_pixels=10**6)
    assert found == [(), (), (), (), (root / "a.png",)]
    assert len(problems) == 4, problems
    for i, problem in enumerate(problems):  # each names its prompt and says why, nothing raised
        assert problem.startswith(f"sample prompt {i}: control"), problem
    assert "cannot be followed" in problems[0] and "cannot be followed" in problems[1]
